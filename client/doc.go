// Package client is latch's public Go client: it talks to a latch cluster
// over the HTTP/1.1 + JSON contract of API.md and hides which server it talks
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
// # Not yet here
//
// TODO(watch): watches (POST /v1/watch and the session event stream) are not
// implemented yet; they wait for the server side. They will be re-registered
// with known_index after a reconnect and jittered before re-reading, as
// DESIGN-NOTES.txt bottlenecks 4 and 5 ask.
//
// The package imports only the standard library and api, never anything
// under internal/.
package client
