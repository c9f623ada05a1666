// Package client is latch's public Go client: it talks to a latch cluster
// over the HTTP/1.1 + JSON contract of docs/api.md and hides which server it talks
// to.
//
// # What it owns
//
//   - Endpoint choice and failover. A Client keeps a list of server URLs,
//     starts on a random one, and moves to another when a server refuses
//     connections, times out or answers 503; it follows the leader_hint of a
//     503 reply. Every retry waits a jittered, exponentially growing delay and
//     the number of attempts is bounded (Config.MaxAttempts). All of it lives
//     in one function, Client.do, and honours the caller's context.Context.
//   - Errors. Every error the server reports comes back as an *api.Error, so
//     errors.Is(err, &api.Error{Code: api.CodeNotFound}) works; giving up after
//     the last attempt yields an *api.Error with api.CodeUnavailable that also
//     wraps the last transport error; a cancelled context yields an error that
//     wraps ctx.Err().
//   - Monotonic reads. The client remembers the highest X-Latch-Index any
//     server has shown it and sends it as min_index on stale reads, so a read
//     never observes an older state than one this client already saw, even
//     after switching servers.
//   - Sessions (NewSession): a keepalive goroutine heartbeats every timeout/3
//     through any reachable server; Done is closed when the session ends.
//     The keepalives run on Config.Clock when set (fault tests give a client
//     a clock that runs slow or fast), else on the real clock.
//     Session.ID is a bearer secret (whoever knows it acts as the session);
//     reads name sessions by their public handle instead (a node's
//     OwnerHandle, a lock holder's or an election leader's SessionHandle),
//     which Session.Handle returns for comparison.
//   - Exactly-once writes. A write made WithSession carries the session id
//     and a fresh request_seq; every retry of that write reuses the same
//     request_seq, so the server applies it once.
//
// # Retry safety
//
// Reads and session-scoped writes are retried on any transport error, 503
// and 429. A write without a session is retried only when it provably never
// reached a server (the connection could not be made) or the server refused
// it with 429; after a 503 or a lost reply its outcome is unknown and the
// *api.Error with api.CodeUnavailable is returned to the caller. Use
// WithSession when a write must survive failover exactly once.
//
// # Watches
//
// Session.Watch registers a watch and returns a Watcher whose Events
// channel delivers notifications in index order without duplicates. A
// session has one event stream (GET /v1/session/{id}/events); its watchHub
// goroutine opens it on one server and, once the reply's headers arrived,
// registers every watch of the session on that same server, because
// watches are server-local: a server accepts a watch only for a session
// whose stream it has attached (409 precondition_failed otherwise). When the
// stream ends (the server crashed, dropped the session's watches as a slow
// consumer, or was replaced), or the server refuses a registration for want
// of the stream (it ended the stream just before), the hub waits a random delay below
// Config.ReconnectJitter (then a growing jittered backoff if connecting
// keeps failing), opens the stream on some server and registers every
// watch that has not fired again with known_index set to the highest index
// the watcher has seen, so the server fires at once (Event.Resync) if
// anything changed meanwhile: nothing is missed. Each notification is
// handed to its reader after a random delay below Config.NotifyJitter (or
// the watch's WatchJitter), so a change to a key the whole fleet watches
// does not become a synchronized stampede of re-reads and re-watches
// (docs/design.md, "Load: herds and heartbeats"). Every event's index raises the
// client's min_index, so a read made after a notification sees the change.
// On a cluster of several shards a watcher keeps these indexes per shard
// (an event names its shard; events of one shard come in index order, in
// no order across shards) and re-registers with known_indexes, every
// shard's position; the client keeps its read positions per shard too and
// sends them all as the min_index vector (docs/api.md, "Consistency").
//
// # Cache
//
// NewCache holds the nodes under a prefix in memory (Cache.Get), fed by one
// persistent recursive watch of a session: every notification makes the
// cache re-read the changed node linearizably, a resync (a watch
// re-registered with known_index after a lost stream found changes it
// missed) makes it reload the whole prefix, and one goroutine applies the
// reads a batch at a time, so a node's cached state only moves forward
// (monotonic reads). GetConsistent reads through the server, through that
// same goroutine. See docs/api.md, "The Go client's cache".
//
// # Locks and elections
//
// Session.AcquireLock, ReleaseLock, JoinElection, ResignElection and
// Client.LockState, ElectionState are the raw calls of docs/api.md; the
// client/recipe package builds the blocking Lock and Election on them.
//
// The package imports only the standard library and api, never anything
// under internal/.
package client
