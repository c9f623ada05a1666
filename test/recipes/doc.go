// Package recipes tests latch's lock and election recipes end to end with
// real processes (issue 5): a 3-node latchd cluster from internal/testkit/proccluster,
// latchctl 'lock' and 'elect' processes holding locks and leaderships for a
// child program, and a protected resource (an HTTP server in the test
// process, optionally behind fencing.Middleware) that logs every write it
// accepts or refuses.
//
// What the tests show:
//
//   - TestCanonicalPausedHolder: the paused-holder failure of docs/design.md. A
//     holder paused with SIGSTOP past its session timeout loses the lock to a
//     new holder with a higher token; when it resumes its stale write is
//     refused by the guard (409) and the new holder's writes stand. The same
//     run without the guard accepts the stale write after the new holder's:
//     the guard, not the lock, is what saves the resource.
//   - TestLockContention: 50 clients contend for one lock; the guard's log
//     shows strictly increasing tokens and holder intervals that never
//     interleave; every grant follows one release, no waiter is woken
//     without getting the lock, and the raft log grows by about two entries
//     per handoff (enqueue and delete: one commit, no polling).
//   - TestElectionFailover: three 'latchctl elect' candidates; kill -9 of the
//     leader's process group brings a new leader with a higher token within
//     the session timeout plus an election allowance; Observe sees every
//     leader in order.
//   - TestClientFailover: a client whose session holds a lock and a watch
//     on one server survives kill -9 of that server (a follower, then the
//     raft leader): session, lock and watch live on, and a change made after
//     the kill is delivered.
//
// Every process a test starts (latchd members, latchctl and their children,
// which share latchctl's process group) is killed by process group id in
// t.Cleanup; nothing else is signalled. The test binary doubles as the
// child program (see TestMain), so nothing but latchd and latchctl is built.
package recipes
