// Package membership tests cluster operations on real latchd processes
// (internal/testkit/proccluster, plus a joining member started here): a learner
// added under a Porcupine-checked workload catches up by snapshot, serves
// linearizable reads (checked in the same history) and stale reads
// (checked for read-your-writes with min_index), is promoted; a voter is
// removed and exits 0; leadership is transferred. The history must be
// linearizable and no acknowledged write may be lost.
package membership
