package httpapi

import (
	"net/http"
	"strconv"

	"github.com/latch-io/latch/api"
)

// snapshot streams a backup file of this member's state (docs/api.md,
// GET /v1/snapshot). Errors before the first byte get the error envelope; an
// error while streaming cuts the stream, which then lacks its trailer and
// is refused by every reader.
func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request) {
	p := requestParams(r, readParams...)
	opts := p.readOptions()
	if p.err != nil {
		h.writeError(w, p.err)
		return
	}
	b, err := h.server.TakeBackup(r.Context(), opts)
	if err != nil {
		h.writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(api.HeaderIndex, strconv.FormatUint(b.Index(), 10))
	w.WriteHeader(http.StatusOK)
	if err := b.Stream(w); err != nil {
		h.log.Warn("snapshot stream cut", "err", err)
		panic(http.ErrAbortHandler) // the client must see a broken stream, not a clean end
	}
}
