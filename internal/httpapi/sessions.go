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
	// Clamped here too, so no timeout over the maximum overflows a duration
	// on its way to being clamped (the decoder bounds it by api.MaxInteger).
	timeoutMs := min(req.TimeoutMs, uint64(h.server.Config().MaxSessionTTL.Milliseconds()))
	out, err := h.server.CreateSession(r.Context(), timeoutMs)
	h.replyIn(w, metaShard, out, out.Index, err)
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
	field := "session_id"
	if len(req.SessionIDs) > 0 {
		field = "session_ids entry"
	}
	ids := make([]uint64, len(raw))
	for i, s := range raw {
		id, err := parseID(field, s)
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
		h.writeError(w, api.SessionGone(ids[0]))
		return
	}
	out := api.Heartbeat{Alive: len(dead) == 0, Index: index}
	for _, id := range dead {
		out.Expired = append(out.Expired, api.FormatID(id))
	}
	h.writeJSONIn(w, metaShard, index, out)
}

func (h *Handler) closeSession(w http.ResponseWriter, r *http.Request) {
	ids, err := h.sessionIDs(w, r, false)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.CloseSession(r.Context(), ids[0])
	if api.CodeOf(err) == api.CodeSessionExpired && out.Indexes != nil {
		h.writeSessionGoneAt(w, err, out.Indexes)
		return
	}
	h.replyIn(w, metaShard, out, out.Index, err)
}

// writeSessionGoneAt answers a close of a session that is not live, on a
// cluster of several shards, as 410 session_expired with the error
// envelope plus indexes: each shard's position at which the session's
// cleanup, if it had one, is applied (an earlier close's reply may have
// been lost). As an error reply it carries no index header.
func (h *Handler) writeSessionGoneAt(w http.ResponseWriter, err error, indexes map[int]uint64) {
	h.writeErrorWith(w, err, func(e api.Error) any {
		return struct {
			Error   api.Error      `json:"error"`
			Indexes map[int]uint64 `json:"indexes"`
		}{e, indexes}
	})
}

// getSession describes a live session. A session that is not live is 410
// session_expired, as for heartbeat, close, events and watch: once expired
// or closed a session is forgotten, so a well-formed id the server does not
// know cannot be told apart from one that ended.
func (h *Handler) getSession(w http.ResponseWriter, r *http.Request) {
	id, err := parseID("session id", r.PathValue("id"))
	if err != nil {
		h.badPathID(w, r, err)
		return
	}
	opts, err := readOnlyOptions(r)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.GetSession(r.Context(), id, opts)
	if api.CodeOf(err) == api.CodeNotFound {
		err = api.SessionGone(id)
	}
	h.replyIn(w, metaShard, out, out.Index, err)
}
