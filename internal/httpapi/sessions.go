package httpapi

import (
	"net/http"

	"github.com/latch-io/latch/api"
)

// maxHeartbeatBody bounds a batched heartbeat: about 40,000 session ids.
const maxHeartbeatBody = 1 << 20

func (h *Handler) createSession(w http.ResponseWriter, r *http.Request) {
	var req api.SessionCreateRequest
	if err := h.decodeBody(w, r, &req); err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.CreateSession(r.Context(), req.TimeoutMs)
	h.reply(w, out, out.Index, err)
}

// sessionIDs reads the session_id or session_ids of a session request.
func (h *Handler) sessionIDs(w http.ResponseWriter, r *http.Request, allowMany bool) ([]uint64, error) {
	var req api.SessionRequest
	limit := h.maxBody
	if allowMany {
		limit = maxHeartbeatBody
	}
	if err := h.decodeBodyLimit(w, r, &req, limit); err != nil {
		return nil, err
	}
	raw := req.SessionIDs
	switch {
	case req.SessionID != "" && len(raw) > 0:
		return nil, api.Errorf(api.CodeInvalidArgument, "give session_id or session_ids, not both")
	case req.SessionID != "":
		raw = []string{req.SessionID}
	case len(raw) == 0:
		return nil, api.Errorf(api.CodeInvalidArgument, "session_id is required")
	case !allowMany:
		return nil, api.Errorf(api.CodeInvalidArgument, "session_ids is only for heartbeats")
	}
	ids := make([]uint64, len(raw))
	for i, s := range raw {
		id, err := api.ParseID(s)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}

func (h *Handler) heartbeat(w http.ResponseWriter, r *http.Request) {
	ids, err := h.sessionIDs(w, r, true)
	if err != nil {
		h.writeError(w, err)
		return
	}
	index, dead, err := h.server.Heartbeat(r.Context(), ids)
	if err != nil {
		h.writeError(w, err)
		return
	}
	if len(ids) == 1 && len(dead) == 1 {
		h.writeError(w, api.Errorf(api.CodeSessionExpired, "session %s has expired or was closed", api.FormatID(ids[0])))
		return
	}
	out := api.Heartbeat{Alive: len(dead) == 0, Index: index}
	for _, id := range dead {
		out.Expired = append(out.Expired, api.FormatID(id))
	}
	h.writeJSON(w, index, out)
}

func (h *Handler) closeSession(w http.ResponseWriter, r *http.Request) {
	ids, err := h.sessionIDs(w, r, false)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.CloseSession(r.Context(), ids[0])
	h.reply(w, out, out.Index, err)
}

func (h *Handler) getSession(w http.ResponseWriter, r *http.Request) {
	opts, err := readOnlyOptions(r)
	id, idErr := api.ParseID(r.PathValue("id"))
	if err == nil {
		err = idErr
	}
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.GetSession(r.Context(), id, opts)
	h.reply(w, out, out.Index, err)
}
