package httpapi

import (
	"net/http"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// The read-only listings of docs/api.md ("Listings"): GET /v1/locks,
// /v1/elections and /v1/sessions take limit, after, consistency and
// min_index; GET /v1/cluster/health takes nothing (routeTable says so).

func (h *Handler) listLocks(w http.ResponseWriter, r *http.Request) {
	page, opts, err := listOptions(r)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.ListLocks(r.Context(), page, opts)
	h.reply(w, out, out.Index, err)
}

func (h *Handler) listElections(w http.ResponseWriter, r *http.Request) {
	page, opts, err := listOptions(r)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.ListElections(r.Context(), page, opts)
	h.reply(w, out, out.Index, err)
}

func (h *Handler) listSessions(w http.ResponseWriter, r *http.Request) {
	page, opts, err := listOptions(r)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.ListSessions(r.Context(), page, opts)
	h.replyIn(w, metaShard, out, out.Index, err)
}

func (h *Handler) clusterHealth(w http.ResponseWriter, r *http.Request) {
	out := h.server.ClusterHealth()
	h.writeJSONIn(w, metaShard, out.Index, out)
}

// listParams are the query parameters of a listing.
var listParams = []string{"limit", "after", "consistency", "min_index"}

// listOptions reads a listing's query: limit (1 to api.MaxListLimit,
// default api.DefaultListLimit), after, consistency and min_index.
func listOptions(r *http.Request) (server.Page, server.ReadOptions, error) {
	p := requestParams(r, listParams...)
	opts := p.readOptions()
	page := server.Page{After: p.values.Get("after"), Limit: api.DefaultListLimit}
	if p.values.Has("limit") {
		n := p.uint("limit")
		if p.err == nil && (n < 1 || n > api.MaxListLimit) {
			p.fail(api.Errorf(api.CodeInvalidArgument, "parameter limit=%d is not from 1 to %d", n, api.MaxListLimit))
		}
		page.Limit = int(n)
	}
	return page, opts, p.err
}
