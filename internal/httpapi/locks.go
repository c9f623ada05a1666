package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/latch-io/latch/api"
)

// maxLockWait bounds wait_ms so a request cannot pin a server goroutine for long.
const maxLockWait = 5 * time.Minute

// The bodies of the lock and election calls. Each takes only its own
// fields (docs/api.md): acquire and release share api.LockRequest in the Go
// client, join and resign api.ElectionRequest, but a fencing_token sent
// with an acquire, a wait_ms with a release or a value with a resign would
// be ignored, so each is refused as an unknown field.
type (
	acquireBody struct {
		Name      string `json:"name"`
		SessionID string `json:"session_id"`
		WaitMs    uint64 `json:"wait_ms"`
	}
	releaseBody struct {
		Name         string `json:"name"`
		SessionID    string `json:"session_id"`
		FencingToken uint64 `json:"fencing_token"`
	}
	joinBody struct {
		Role      string `json:"role"`
		SessionID string `json:"session_id"`
		Value     string `json:"value"`
	}
	resignBody struct {
		Role      string `json:"role"`
		SessionID string `json:"session_id"`
	}
)

func (h *Handler) acquireLock(w http.ResponseWriter, r *http.Request) {
	req, session, err := decodeWithSession(h, w, r, func(q *acquireBody) string { return q.SessionID })
	if err == nil && req.WaitMs > uint64(maxLockWait.Milliseconds()) {
		err = api.Errorf(api.CodeInvalidArgument, "wait_ms over %d", maxLockWait.Milliseconds())
	}
	if err != nil {
		h.writeError(w, err)
		return
	}
	wait := time.Duration(req.WaitMs) * time.Millisecond
	lock, err := h.server.AcquireLock(r.Context(), req.Name, session, wait)
	if err == nil && !lock.Held {
		h.writeLockNotHeld(w, req.Name, lock)
		return
	}
	h.replyIn(w, lock.Shard, lock, lock.Index, err)
}

// writeLockNotHeld answers an acquire that gave up after wait_ms (a reply
// with Held false) as docs/api.md's 409: the lock_not_held error envelope
// plus held:false, the session's handle, its position in the queue, the
// queue node, the index and (in a cluster of several shards) its shard:
// the queue node is in that shard's log at that index, and a read of it
// elsewhere may wait for it. As an error reply it carries no index header,
// so no shard header either.
func (h *Handler) writeLockNotHeld(w http.ResponseWriter, name string, lock api.Lock) {
	e := &api.Error{Code: api.CodeLockNotHeld, Message: "lock " + name + " not acquired within wait_ms"}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code.Status())
	_ = json.NewEncoder(w).Encode(struct {
		Error         api.Error `json:"error"`
		Held          bool      `json:"held"`
		SessionHandle string    `json:"session_handle"`
		Position      int       `json:"position"`
		Path          string    `json:"path,omitempty"`
		Index         uint64    `json:"index"`
		Shard         int       `json:"shard,omitempty"`
	}{*e, false, lock.SessionHandle, lock.Position, lock.Path, lock.Index, lock.Shard})
}

func (h *Handler) releaseLock(w http.ResponseWriter, r *http.Request) {
	req, session, err := decodeWithSession(h, w, r, func(q *releaseBody) string { return q.SessionID })
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.ReleaseLock(r.Context(), req.Name, session, req.FencingToken)
	h.replyIn(w, out.Shard, out, out.Index, err)
}

func (h *Handler) lockState(w http.ResponseWriter, r *http.Request) {
	opts, err := readOnlyOptions(r)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.LockState(r.Context(), r.PathValue("name"), opts)
	h.replyIn(w, out.Shard, out, out.Index, err)
}

func (h *Handler) joinElection(w http.ResponseWriter, r *http.Request) {
	req, session, err := decodeWithSession(h, w, r, func(q *joinBody) string { return q.SessionID })
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.JoinElection(r.Context(), req.Role, session, []byte(req.Value))
	h.replyIn(w, out.Shard, out, out.Index, err)
}

func (h *Handler) resignElection(w http.ResponseWriter, r *http.Request) {
	req, session, err := decodeWithSession(h, w, r, func(q *resignBody) string { return q.SessionID })
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.ResignElection(r.Context(), req.Role, session)
	h.replyIn(w, out.Shard, out, out.Index, err)
}

func (h *Handler) electionState(w http.ResponseWriter, r *http.Request) {
	opts, err := readOnlyOptions(r)
	if err != nil {
		h.writeError(w, err)
		return
	}
	out, err := h.server.ElectionState(r.Context(), r.PathValue("role"), opts)
	h.replyIn(w, out.Shard, out, out.Index, err)
}
