// Package chaos is latch's Jepsen-style fault suite over real processes.
// Run starts a cluster of latchd processes (internal/testkit/proccluster), runs
// concurrent client workloads through the HTTP API, injects faults on a
// schedule drawn from a seed, heals, waits for quiescence and then checks
// the histories with the checkers of docs/correctness.md. The register, set,
// lock and ephemeral workloads and their checkers are internal/check's (the
// copy latchctl check runs too); lockproc and watch are this package's:
//
//   - L: get/put/CAS on a few versioned registers, checked with Porcupine
//     (internal/check/linearize); an Unknown verdict is a failure.
//   - F: lock acquire -> write through a fencing.Guard -> release, with
//     holders that stall past their session timeout and then write; the
//     guard's accepted tokens must never decrease. Twice: in-process
//     clients that stop heartbeating (lock), and real client processes
//     that the pause-lock-holder fault SIGSTOPs (lockproc).
//   - Q, D: sequential creates under a session, retried on other nodes
//     with the same request_seq; names unique and increasing per parent,
//     and every acknowledged create present on every replica at the end.
//   - S: sessions that die (stop heartbeating) while owning ephemeral
//     nodes: a node never disappears while its session is still alive, and
//     none is left on any replica after its session ended.
//   - W: watchers read their session's event stream over HTTP and move to
//     another member with known_index = the last index received; per
//     session, events never go back in index, none arrives twice, every
//     acknowledged write to a watched key is seen (or covered by a
//     catch-up event), and every event names a committed write.
//
// Faults: kill -9 of one member, of a minority, of the leader, of all;
// crashes that lose unsynced data (SIGKILL, then the data directory cut back
// to its last fsync by the member's sync journal; of the leader, of all);
// SIGSTOP of the leader past the election timeout and of a lock-holding
// client process past its session timeout; restarts; membership changes
// (leader transfer; a member removed, then a new one added as a learner in
// its slot and promoted); and, where network namespaces work, partitions
// (isolated leader, majority/minority, bridge, ring, one-way); clock faults
// (clock.go: a leader's clock at 2x or 0.5x and a member's wall clock jumping
// an hour, through latchd's test-only clock control, and the lock workload's
// clients on a slow clock). A run ends
// with Report.Summary, the summary line of docs/correctness.md.
package chaos
