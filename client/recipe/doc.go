// Package recipe builds latch's blocking lock and leader election on the
// client package, the ZooKeeper way described in docs/design.md ("Why a
// lock needs a fencing token"): a lock or a candidacy is an ephemeral sequential node of a Session
// (/locks/{name}/lock-N, /elections/{role}/candidate-N), the lowest node
// holds or leads, and the fencing token is the raft index at which that
// node was created, strictly increasing from one holder to the next.
//
// Every waiter waits on its predecessor only: a Lock lets the server wait
// (POST /v1/lock/acquire with a wait_ms bounded by the caller's deadline,
// called again while the context lives, keeping its place, and given up
// once the context ends, after the call in flight ended); an Election
// candidate watches the one node just ahead of it (no jitter: it is the only
// watcher) and asks again when that node goes. A release or a leader's
// death therefore wakes exactly one client, never a herd.
//
// Holding is not proof. Lost is closed when the session ends (expiry,
// close, a whole timeout without a heartbeat) or the node is deleted, but a
// paused process learns it late: every write to the protected resource must
// carry the token (see package fencing), which is what rejects a stale
// holder. A Lock or an Election belongs to one Session; a session holds one
// place per lock name and one candidacy per role, so two Lock values of one
// session and name share a place (use one session per independent holder).
//
// A LeaderInfo names the leader by its session handle (compare it with
// client.Session.Handle), never by its id, which is the session's secret.
//
// Lock and Election methods are safe for concurrent use, but Acquire and
// Campaign are meant to be called by one goroutine at a time.
package recipe
