package httpapi

import (
	"net/http"

	"github.com/latch-io/latch/api"
)

// addMemberRequest is the body of POST /v1/cluster/members. A member always
// joins as a learner; learner:false asks the leader to promote it once it has
// caught up.
type addMemberRequest struct {
	Name      string `json:"name"`
	PeerURL   string `json:"peer_url"`
	ClientURL string `json:"client_url"`
	Learner   bool   `json:"learner"`
}

func (h *Handler) addMember(w http.ResponseWriter, r *http.Request) {
	var req addMemberRequest
	if err := h.decodeBody(w, r, &req); err != nil {
		h.writeError(w, err)
		return
	}
	m, err := h.server.AddMember(r.Context(), api.Member{Name: req.Name, PeerURL: req.PeerURL, ClientURL: req.ClientURL}, !req.Learner)
	h.replyIn(w, metaShard, m, h.server.AppliedIndex(), err)
}

func (h *Handler) removeMember(w http.ResponseWriter, r *http.Request) {
	err := h.server.RemoveMemberNamed(r.Context(), r.PathValue("id"))
	h.replyIn(w, metaShard, map[string]bool{"removed": true}, h.server.AppliedIndex(), err)
}

func (h *Handler) promoteMember(w http.ResponseWriter, r *http.Request) {
	if err := h.decodeNoBody(w, r); err != nil {
		h.writeError(w, err)
		return
	}
	id, err := h.server.MemberIDByName(r.Context(), r.PathValue("id"))
	if err != nil {
		h.writeError(w, err)
		return
	}
	m, err := h.server.PromoteMember(r.Context(), id)
	h.replyIn(w, metaShard, m, h.server.AppliedIndex(), err)
}

func (h *Handler) transferLeader(w http.ResponseWriter, r *http.Request) {
	var req api.LeaderTransferRequest
	if err := h.decodeBody(w, r, &req); err != nil {
		h.writeError(w, err)
		return
	}
	id, err := h.server.MemberIDByName(r.Context(), req.To)
	if err == nil {
		err = h.server.TransferLeadership(r.Context(), id)
	}
	if err != nil {
		h.writeError(w, err)
		return
	}
	st := h.server.Status()
	h.writeJSONIn(w, metaShard, st.AppliedIndex, st)
}
