package httpapi

import (
	"net/http"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

const kvPrefix = "/v1/kv/"

// serveNode dispatches /v1/kv/{path} by method.
func (h *Handler) serveNode(w http.ResponseWriter, r *http.Request, path string) {
	if err := refuseBody(r); err != nil {
		h.writeError(w, err)
		return
	}
	switch r.Method {
	case http.MethodPut:
		h.putNode(w, r, path)
	case http.MethodGet, http.MethodHead:
		h.getNode(w, r, path)
	case http.MethodDelete:
		h.deleteNode(w, r, path)
	default:
		h.methodNotAllowed(w, r, []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete})
	}
}

// putBody is the body of a PUT as decoded: value is required (an explicit
// "" is a value), so a body without it cannot wipe a node by accident.
type putBody struct {
	Value *string `json:"value"`
}

func (h *Handler) putNode(w http.ResponseWriter, r *http.Request, path string) {
	p := requestParams(r, "prev_version", "ephemeral", "sequential", "session_id", "request_seq")
	req := server.PutRequest{Path: path}
	req.Precondition, req.Version = p.precondition()
	req.Ephemeral, req.Sequential = p.bool("ephemeral"), p.bool("sequential")
	req.SessionID, req.RequestSeq = p.session()
	if p.err != nil {
		h.writeError(w, p.err)
		return
	}
	var body putBody
	if err := h.decodePutBody(w, r, &body); err != nil {
		h.writeError(w, err)
		return
	}
	if body.Value == nil {
		h.writeError(w, api.Errorf(api.CodeInvalidArgument, `a PUT needs a JSON body with a string "value" (give "value": "" to store an empty value)`))
		return
	}
	req.Value = []byte(*body.Value)
	node, err := h.server.Put(r.Context(), req)
	h.replyIn(w, h.server.ShardOf(path), api.Written{Path: node.Path, Version: node.Version, CreatedIndex: node.CreatedIndex,
		ModifiedIndex: node.ModifiedIndex, Index: node.Index}, node.Index, err)
}

func (h *Handler) getNode(w http.ResponseWriter, r *http.Request, path string) {
	p := requestParams(r, "consistency", "min_index", "children")
	opts := p.readOptions()
	children := p.bool("children")
	if p.err != nil {
		h.writeError(w, p.err)
		return
	}
	if children {
		list, err := h.server.Children(r.Context(), path, opts)
		h.replyIn(w, h.server.ChildShardOf(path), list, list.Index, err)
		return
	}
	node, err := h.server.Get(r.Context(), path, opts)
	h.replyIn(w, h.server.ShardOf(path), node, node.Index, err)
}

func (h *Handler) deleteNode(w http.ResponseWriter, r *http.Request, path string) {
	p := requestParams(r, "prev_version", "recursive", "session_id", "request_seq")
	req := server.DeleteRequest{Path: path}
	req.Precondition, req.Version = p.precondition()
	req.Recursive = p.bool("recursive")
	req.SessionID, req.RequestSeq = p.session()
	if p.err != nil {
		h.writeError(w, p.err)
		return
	}
	out, err := h.server.Delete(r.Context(), req)
	h.replyIn(w, h.server.ShardOf(path), out, out.Index, err)
}
