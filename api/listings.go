package api

// The read-only listings of docs/api.md ("Listings"): every lock, every
// election, every live session, and the health of every member. They are
// bounded: a page holds at most MaxListLimit entries, sorted by name (or
// handle), with Truncated and NextAfter saying where the next page starts.

// Listing page bounds: the default and the largest `limit`.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// LockEntry is one lock of GET /v1/locks: GET /v1/lock/{name} for each name.
type LockEntry struct {
	Name    string  `json:"name"`
	Holder  *Holder `json:"holder"`
	Waiters int     `json:"waiters"`
}

// LockList is the reply to GET /v1/locks.
type LockList struct {
	Locks     []LockEntry `json:"locks"`
	Truncated bool        `json:"truncated"`
	NextAfter string      `json:"next_after,omitempty"`
	// Index is the applied index of the names' view: in a cluster of
	// several shards, of the shard of /locks's children.
	Index uint64 `json:"index"`
	// Indexes, in a cluster of several shards, is the applied index of
	// each shard read for the page: the names' and the queues'. Absent
	// with one shard.
	Indexes map[int]uint64 `json:"indexes,omitempty"`
}

// ElectionEntry is one election of GET /v1/elections: GET
// /v1/election/{role} for each role.
type ElectionEntry struct {
	Role       string  `json:"role"`
	Leader     *Leader `json:"leader"`
	Candidates int     `json:"candidates"`
}

// ElectionList is the reply to GET /v1/elections.
type ElectionList struct {
	Elections []ElectionEntry `json:"elections"`
	Truncated bool            `json:"truncated"`
	NextAfter string          `json:"next_after,omitempty"`
	// Index and Indexes are as in LockList, the names being those of
	// /elections's children.
	Index   uint64         `json:"index"`
	Indexes map[int]uint64 `json:"indexes,omitempty"`
}

// SessionEntry is one live session of GET /v1/sessions, named by its
// handle (never its id, a bearer secret). ExpiresInMs is the time left
// before the leader expires it without a heartbeat: present only in a
// reply from the leader, the one member that decides expiry.
type SessionEntry struct {
	SessionHandle  string  `json:"session_handle"`
	TimeoutMs      uint64  `json:"timeout_ms"`
	EphemeralCount int     `json:"ephemeral_count"`
	ExpiresInMs    *uint64 `json:"expires_in_ms,omitempty"`
}

// SessionList is the reply to GET /v1/sessions. Count and ExpiringSoon
// cover every live session, not only the page; ExpiryKnown is true only
// in a reply from the leader (ExpiringSoon is then the sessions with less
// than half their timeout left, else 0).
type SessionList struct {
	Count        int            `json:"count"`
	ExpiryKnown  bool           `json:"expiry_known"`
	ExpiringSoon int            `json:"expiring_soon"`
	Sessions     []SessionEntry `json:"sessions"`
	Truncated    bool           `json:"truncated"`
	NextAfter    string         `json:"next_after,omitempty"`
	Index        uint64         `json:"index"`
}

// MemberHealth is one member of GET /v1/cluster/health: the member object
// and the role and indexes it last reported of itself to the replying
// server over the peer transport (the top-level fields are its meta group's,
// as its GET /v1/status has them). Reachable false (with Error) means no
// report of it arrived within the last few seconds; the status fields are
// then zero.
// Lag is how far its applied index trails the highest commit index any
// member reported.
type MemberHealth struct {
	Member
	Reachable    bool   `json:"reachable"`
	Error        string `json:"error,omitempty"`
	Role         string `json:"role,omitempty"`
	Term         uint64 `json:"term"`
	LeaderID     string `json:"leader_id"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Lag          uint64 `json:"lag"`
	// Shards, with more than one shard, are the member's role and indexes
	// in each shard's group, as its GET /v1/status reports them.
	Shards []ShardStatus `json:"shards,omitempty"`
}

// ClusterHealth is the reply to GET /v1/cluster/health. LeaderID is the
// leader that the reachable members with the highest term agree on ("" if
// none is agreed). Answered is the name of the member that replied.
type ClusterHealth struct {
	Answered string         `json:"answered_by"`
	LeaderID string         `json:"leader_id"`
	Members  []MemberHealth `json:"members"`
	Index    uint64         `json:"index"`
}
