package api

import (
	"fmt"
	"strconv"
	"strings"
)

// Header names of the HTTP contract.
const (
	// HeaderIndex carries the applied raft index of the answering node on every
	// successful reply.
	HeaderIndex = "X-Latch-Index"
	// HeaderShards carries, on every successful reply of a member of a
	// cluster of several shards, the cluster's shard count; absent with one.
	HeaderShards = "X-Latch-Shards"
	// HeaderShard names, beside HeaderShards, the shard whose log
	// HeaderIndex is of, on every successful reply whose index is of one
	// shard (docs/api.md, "Sharded clusters").
	HeaderShard = "X-Latch-Shard"
	// HeaderFencingToken is read by the fencing middleware on protected writes.
	HeaderFencingToken = "Latch-Fencing-Token"
)

// Consistency levels of a read.
const (
	Linearizable = "linearizable"
	Stale        = "stale"
)

// Watch event kinds.
const (
	EventCreated         = "CREATED"
	EventChanged         = "CHANGED"
	EventDeleted         = "DELETED"
	EventChildrenChanged = "CHILDREN_CHANGED"
)

// MaxInteger is the largest number any JSON number or numeric query
// parameter of the API may carry: 2^53-1, the largest integer every JSON
// implementation represents exactly. Larger values are refused with
// invalid_argument, never wrapped or rounded.
const MaxInteger = 1<<53 - 1

// Node is the reply to GET /v1/kv/{path}. Every field is always present: a
// persistent node has "ephemeral": false and "owner_handle": "", an empty
// value is "value": "". OwnerHandle is the owner's SessionHandle, never its
// id: a reader learns which session owns the node, not how to act as it.
type Node struct {
	Path          string `json:"path"`
	Value         string `json:"value"`
	Version       uint64 `json:"version"`
	CreatedIndex  uint64 `json:"created_index"`
	ModifiedIndex uint64 `json:"modified_index"`
	Ephemeral     bool   `json:"ephemeral"`
	OwnerHandle   string `json:"owner_handle"`
	ChildrenCount int    `json:"children_count"`
	Index         uint64 `json:"index"`
	// ChildrenIndex, set only in a cluster of several shards when the
	// node's children live in another shard than the node, is the applied
	// index of that shard at which ChildrenCount was read (Index is the
	// node's shard's).
	ChildrenIndex uint64 `json:"children_index,omitempty"`
	// CreatedAtMs and ModifiedAtMs are the wall-clock times, in
	// milliseconds since the Unix epoch, of the node's create and of its
	// latest write, as the member that proposed each write stamped it into
	// the log (ZooKeeper's ctime and mtime). Omitted (0) for a node made or
	// written by a binary that kept no times.
	CreatedAtMs  uint64 `json:"created_at_ms,omitempty"`
	ModifiedAtMs uint64 `json:"modified_at_ms,omitempty"`
	// ChildrenVersion is the number of creates and deletes of the node's
	// children (ZooKeeper's cversion), omitted while 0. In a cluster of
	// several shards it counts only the children in the node's own shard:
	// 0 for a node whose children live in another shard.
	ChildrenVersion uint64 `json:"cversion,omitempty"`
}

// Written is the reply to PUT /v1/kv/{path}: the node's new version and
// indexes (its path is the created name for a sequential create). A client
// may decode it into a Node, whose other fields stay zero.
type Written struct {
	Path          string `json:"path"`
	Version       uint64 `json:"version"`
	CreatedIndex  uint64 `json:"created_index"`
	ModifiedIndex uint64 `json:"modified_index"`
	Index         uint64 `json:"index"`
}

// PutRequest is the body of PUT /v1/kv/{path}; the rest are query parameters.
type PutRequest struct {
	Value string `json:"value"`
}

// Children is the reply to GET /v1/kv/{path}?children=true.
type Children struct {
	Path     string   `json:"path"`
	Children []string `json:"children"`
	Index    uint64   `json:"index"`
	// Shard is set only in a result of POST /v1/read: the shard whose log
	// Index is of (left out for shard 0, and with one shard).
	Shard int `json:"shard,omitempty"`
}

// Deleted is the reply to DELETE /v1/kv/{path}.
type Deleted struct {
	Deleted bool   `json:"deleted"`
	Index   uint64 `json:"index"`
}

// SessionCreateRequest is the body of POST /v1/session/create.
type SessionCreateRequest struct {
	TimeoutMs uint64 `json:"timeout_ms"`
}

// Session describes a session: the reply to create and to GET /v1/session/{id}.
type Session struct {
	// SessionID is 64 random bits chosen by the server (FormatID). It is a
	// secret: whoever knows it can write, heartbeat, release and close as
	// the session, so keep it out of logs and shared places.
	SessionID string `json:"session_id"`
	// SessionHandle is the session's public SessionHandle: what other
	// sessions' reads show for it (a node's owner_handle, a lock's holder,
	// an election's leader).
	SessionHandle  string `json:"session_handle"`
	TimeoutMs      uint64 `json:"timeout_ms"`
	EphemeralCount int    `json:"ephemeral_count"`
	Index          uint64 `json:"index"`
}

// SessionRequest is the body of heartbeat and close. A heartbeat may instead
// carry SessionIDs, many sessions kept alive by one call (a client process
// holding many sessions shares one request per interval).
type SessionRequest struct {
	SessionID  string   `json:"session_id,omitempty"`
	SessionIDs []string `json:"session_ids,omitempty"`
}

// Heartbeat is the reply to POST /v1/session/heartbeat. With SessionIDs,
// Alive is true only if every session is, and Expired lists those that are not
// (a single dead session_id is a 410 instead).
type Heartbeat struct {
	Alive   bool     `json:"alive"`
	Expired []string `json:"expired,omitempty"`
	Index   uint64   `json:"index"`
}

// Closed is the reply to POST /v1/session/close.
type Closed struct {
	Closed bool   `json:"closed"`
	Index  uint64 `json:"index"`
	// Indexes, in a cluster of several shards, is each shard's index at
	// which the session's cleanup there is applied (Index is shard 0's,
	// the close's own entry); absent with one shard.
	Indexes map[int]uint64 `json:"indexes,omitempty"`
}

// WatchRequest is the body of POST /v1/watch.
type WatchRequest struct {
	Path       string `json:"path"`
	Recursive  bool   `json:"recursive"`
	SessionID  string `json:"session_id"`
	KnownIndex uint64 `json:"known_index,omitempty"`
	Persistent bool   `json:"persistent,omitempty"`
	// KnownIndexes is known_index per shard (shard number to index), for a
	// watch whose events come from several shards of a sharded cluster: the
	// client's position in each shard's log (docs/api.md, watch rules).
	KnownIndexes map[int]uint64 `json:"known_indexes,omitempty"`
}

// Watch is the reply to POST /v1/watch.
type Watch struct {
	WatchID        string `json:"watch_id"`
	CurrentVersion uint64 `json:"current_version"`
	Index          uint64 `json:"index"`
	// Indexes, in a cluster of several shards, is the applied index of
	// every shard the watch covers at its registration there (Index is the
	// watched path's shard's); absent with one shard.
	Indexes map[int]uint64 `json:"indexes,omitempty"`
	// Shard is the watched path's shard, whose log Index is of; absent (0)
	// for shard 0, and always with one shard.
	Shard int `json:"shard,omitempty"`
}

// Event is one watch notification on a session's event stream.
type Event struct {
	WatchID string `json:"watch_id"`
	Event   string `json:"event"`
	Path    string `json:"path"`
	Version uint64 `json:"version"`
	Index   uint64 `json:"index"`
	// Shard is the shard whose log Index is of, in a cluster of several
	// shards; absent (0) for shard 0, and always with one shard.
	Shard int `json:"shard,omitempty"`
}

// LockRequest is the body of POST /v1/lock/acquire and /v1/lock/release.
// Each call takes only its own fields: WaitMs is the acquire's,
// FencingToken the release's (the other is refused, 400).
type LockRequest struct {
	Name         string `json:"name"`
	SessionID    string `json:"session_id"`
	WaitMs       uint64 `json:"wait_ms,omitempty"`
	FencingToken uint64 `json:"fencing_token,omitempty"`
}

// Lock is the reply to POST /v1/lock/acquire (Held true) and the body of its
// 409 lock_not_held reply (Held false, Position set). SessionHandle is the
// requesting session's handle, the one LockState shows for it as holder.
type Lock struct {
	Held          bool   `json:"held"`
	SessionHandle string `json:"session_handle"`
	FencingToken  uint64 `json:"fencing_token,omitempty"`
	Path          string `json:"path,omitempty"`
	Position      int    `json:"position,omitempty"`
	Index         uint64 `json:"index"`
	// Shard is the shard of the lock's queue, whose log Index (and
	// FencingToken) is of, in a cluster of several shards; absent (0) for
	// shard 0, and always with one shard.
	Shard int `json:"shard,omitempty"`
}

// Released is the reply to POST /v1/lock/release.
type Released struct {
	Released bool   `json:"released"`
	Index    uint64 `json:"index"`
	// Shard is the shard of the lock's queue, whose log Index (and
	// FencingToken) is of, in a cluster of several shards; absent (0) for
	// shard 0, and always with one shard.
	Shard int `json:"shard,omitempty"`
}

// Holder is a lock's current holder, named by its session's handle
// (SessionHandle), never by its id.
type Holder struct {
	SessionHandle string `json:"session_handle"`
	FencingToken  uint64 `json:"fencing_token"`
	Path          string `json:"path"`
}

// LockState is the reply to GET /v1/lock/{name}.
type LockState struct {
	Holder  *Holder `json:"holder"`
	Waiters int     `json:"waiters"`
	Index   uint64  `json:"index"`
	// Shard is the shard of the lock's queue, whose log Index (and
	// FencingToken) is of, in a cluster of several shards; absent (0) for
	// shard 0, and always with one shard.
	Shard int `json:"shard,omitempty"`
}

// ElectionRequest is the body of POST /v1/election/join and /resign. Value
// is the join's: a resign with one is refused (400).
type ElectionRequest struct {
	Role      string `json:"role"`
	SessionID string `json:"session_id"`
	Value     string `json:"value,omitempty"`
}

// Candidacy is the reply to POST /v1/election/join. SessionHandle is the
// requesting session's handle, the one ElectionState shows for it as leader.
type Candidacy struct {
	IsLeader      bool   `json:"is_leader"`
	SessionHandle string `json:"session_handle"`
	FencingToken  uint64 `json:"fencing_token"`
	Watching      string `json:"watching,omitempty"`
	Index         uint64 `json:"index"`
	// Shard is the shard of the election's candidate queue, whose log Index (and
	// FencingToken) is of, in a cluster of several shards; absent (0) for
	// shard 0, and always with one shard.
	Shard int `json:"shard,omitempty"`
}

// Resigned is the reply to POST /v1/election/resign.
type Resigned struct {
	Resigned bool   `json:"resigned"`
	Index    uint64 `json:"index"`
	// Shard is the shard of the election's candidate queue, whose log Index (and
	// FencingToken) is of, in a cluster of several shards; absent (0) for
	// shard 0, and always with one shard.
	Shard int `json:"shard,omitempty"`
}

// Leader is an election's current leader, named by its session's handle
// (SessionHandle), never by its id.
type Leader struct {
	SessionHandle string `json:"session_handle"`
	Value         string `json:"value"`
	FencingToken  uint64 `json:"fencing_token"`
}

// ElectionState is the reply to GET /v1/election/{role}.
type ElectionState struct {
	Leader     *Leader `json:"leader"`
	Candidates int     `json:"candidates"`
	Index      uint64  `json:"index"`
	// Shard is the shard of the election's candidate queue, whose log Index (and
	// FencingToken) is of, in a cluster of several shards; absent (0) for
	// shard 0, and always with one shard.
	Shard int `json:"shard,omitempty"`
}

// Member is one server of the cluster. Voter and Learner are always both
// present and exactly one is true: a voter votes in elections and counts
// toward the commit quorum; a learner only receives the log.
type Member struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	PeerURL   string `json:"peer_url"`
	ClientURL string `json:"client_url,omitempty"`
	Voter     bool   `json:"voter"`
	Learner   bool   `json:"learner"`
}

// Status is the reply to GET /v1/status.
type Status struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Role         string   `json:"role"`
	Term         uint64   `json:"term"`
	LeaderID     string   `json:"leader_id"`
	LeaderClient string   `json:"leader_client_url,omitempty"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	Members      []Member `json:"members"`
	// Storage is "ok", or "disk full" while this member's WAL or snapshot
	// store cannot get space; StorageError then says which and why.
	Storage      string `json:"storage"`
	StorageError string `json:"storage_error,omitempty"`
	// Shards is every shard's state on this server, by shard number; the
	// fields above are shard 0's (the meta group's).
	Shards []ShardStatus `json:"shards"`
}

// ShardStatus is one shard's consensus group as one server sees it.
type ShardStatus struct {
	Shard        int    `json:"shard"`
	Role         string `json:"role"`
	LeaderID     string `json:"leader_id"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// Quiesced is set while the shard's group is quiesced on this server
	// (idle: it neither ticks nor heartbeats); GET /v1/status only.
	Quiesced bool `json:"quiesced,omitempty"`
}

// Members is the reply to GET /v1/cluster/members.
type Members struct {
	Members []Member `json:"members"`
	Index   uint64   `json:"index"`
}

// LeaderTransferRequest is the body of POST /v1/cluster/leader.
type LeaderTransferRequest struct {
	To string `json:"to"`
}

// FormatID renders a session, member or watch id as docs/api.md's opaque string
// ("0x" and 16 hex digits).
func FormatID(id uint64) string { return fmt.Sprintf("0x%016x", id) }

// ParseID parses an id rendered by FormatID (the "0x" prefix is optional).
// The error is an *Error with CodeInvalidArgument.
func ParseID(s string) (uint64, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if t == "" || len(t) > 16 {
		return 0, Errorf(CodeInvalidArgument, "malformed id %q", s)
	}
	id, err := strconv.ParseUint(t, 16, 64)
	if err != nil || id == 0 {
		return 0, Errorf(CodeInvalidArgument, "malformed id %q", s)
	}
	return id, nil
}
