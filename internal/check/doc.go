// Package check holds latch's safety checker over the HTTP API: client
// workloads and the checkers of docs/correctness.md that judge their
// histories. It owns one copy of them, run by two callers: 'latchctl check'
// (internal/cli), against any cluster a user names while the user injects
// faults, and the fault suite (internal/testkit/chaos), which starts its own
// cluster and injects faults on a schedule.
//
// The workloads (NewWorkload):
//
//   - register (L): get/put/CAS on a few versioned registers, checked with
//     Porcupine (internal/check/linearize); an Unknown verdict is a failure,
//     and a failing history is written as Porcupine's HTML visualization
//     into Options.OutDir.
//   - set (Q, D): sequential creates under a session, retried on other
//     members with the same request_seq; names unique and increasing per
//     parent, and every acknowledged create present on every member at the
//     end, with the created index the client was told.
//   - lock (F): acquire -> write through a fencing.Guard -> release, with
//     holders that stall past their session timeout and then write; the
//     guard's accepted tokens must never decrease.
//   - ephemeral (S): sessions that die owning an ephemeral node: a node never
//     disappears while its session is still alive, and none is left on any
//     member after its session ended.
//
// Invariants:
//   - Every key a workload writes is Options.Prefix followed by the
//     workload's own path (Run.Key); the lock workload's only other write is
//     the queue of its lock Options.LockName. A caller that owns nothing but
//     a prefix keeps the workloads there.
//   - Requests go to one member each, with no retry or failover inside
//     Call: a workload sees exactly what each member answered, and records an
//     operation whose outcome it cannot know as open (never as failed).
//   - A Report only grows while workloads run (Run.Anomaly, Run.Update are
//     safe for concurrent use); Report.Summary is the one-line summary of
//     docs/correctness.md, and any anomaly not marked "liveness:" is a
//     safety failure.
package check
