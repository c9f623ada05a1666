package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/latch-io/latch/api"
)

// maxLockWait bounds wait_ms so a request cannot pin a server goroutine for long.
const maxLockWait = 5 * time.Minute

func (h *Handler) acquireLock(w http.ResponseWriter, r *http.Request) {
	var req api.LockRequest
	if err := h.decodeBody(w, r, &req); err != nil {
		h.writeError(w, err)
		return
	}
	session, err := api.ParseID(req.SessionID)
	if err != nil {
		h.writeError(w, err)
		return
	}
	wait := time.Duration(req.WaitMs) * time.Millisecond
	if wait > maxLockWait {
		h.writeError(w, api.Errorf(api.CodeInvalidArgument, "wait_ms over %d", maxLockWait.Milliseconds()))
		return
	}
	lock, err := h.server.AcquireLock(r.Context(), req.Name, session, wait)
	var e *api.Error
	if errors.As(err, &e) && e.Code == api.CodeLockNotHeld {
		h.writeLockNotHeld(w, e, lock)
		return
	}
	if err != nil {
		h.writeError(w, err)
		return
	}
	h.writeJSON(w, lock.Index, lock)
}

// writeLockNotHeld writes API.md's 409 for an acquire that gave up: the error
// envelope plus held:false and the position in the queue.
func (h *Handler) writeLockNotHeld(w http.ResponseWriter, e *api.Error, lock api.Lock) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code.Status())
	_ = json.NewEncoder(w).Encode(struct {
		Error    api.Error `json:"error"`
		Held     bool      `json:"held"`
		Position int       `json:"position"`
		Index    uint64    `json:"index"`
	}{*e, false, lock.Position, lock.Index})
}

func (h *Handler) releaseLock(w http.ResponseWriter, r *http.Request) {
	var req api.LockRequest
	if err := h.decodeBody(w, r, &req); err != nil {
		h.writeError(w, err)
		return
	}
	session, err := api.ParseID(req.SessionID)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.ReleaseLock(r.Context(), req.Name, session, req.FencingToken)
	if err != nil {
		h.writeError(w, err)
		return
	}
	h.writeJSON(w, out.Index, out)
}

func (h *Handler) lockState(w http.ResponseWriter, r *http.Request) {
	p := newParams(r.URL.Query(), "consistency", "min_index")
	opts := p.readOptions()
	if p.err != nil {
		h.writeError(w, p.err)
		return
	}
	out, err := h.server.LockState(r.Context(), r.PathValue("name"), opts)
	if err != nil {
		h.writeError(w, err)
		return
	}
	h.writeJSON(w, out.Index, out)
}

func (h *Handler) joinElection(w http.ResponseWriter, r *http.Request) {
	var req api.ElectionRequest
	if err := h.decodeBody(w, r, &req); err != nil {
		h.writeError(w, err)
		return
	}
	session, err := api.ParseID(req.SessionID)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.JoinElection(r.Context(), req.Role, session, []byte(req.Value))
	if err != nil {
		h.writeError(w, err)
		return
	}
	h.writeJSON(w, out.Index, out)
}

func (h *Handler) resignElection(w http.ResponseWriter, r *http.Request) {
	var req api.ElectionRequest
	if err := h.decodeBody(w, r, &req); err != nil {
		h.writeError(w, err)
		return
	}
	session, err := api.ParseID(req.SessionID)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.ResignElection(r.Context(), req.Role, session)
	if err != nil {
		h.writeError(w, err)
		return
	}
	h.writeJSON(w, out.Index, out)
}

func (h *Handler) electionState(w http.ResponseWriter, r *http.Request) {
	p := newParams(r.URL.Query(), "consistency", "min_index")
	opts := p.readOptions()
	if p.err != nil {
		h.writeError(w, p.err)
		return
	}
	out, err := h.server.ElectionState(r.Context(), r.PathValue("role"), opts)
	if err != nil {
		h.writeError(w, err)
		return
	}
	h.writeJSON(w, out.Index, out)
}
