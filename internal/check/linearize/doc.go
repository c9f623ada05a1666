// Package linearize is latch's linearizability checker L (docs/correctness.md): a
// Porcupine model of a versioned register per key, a thread-safe recorder of
// client histories, and a checker that treats a timed-out search as failure.
//
// The model: each key holds {exists, value, version}; a get returns it, a put
// writes a value and bumps the version (1 on create), a CAS writes only when
// the key's version equals the expected one (0 meaning "must not exist").
// Histories are partitioned by key.
//
// MultiModel is a second model, for transactions: the same registers on a
// few keys, with transactions that write several keys at once, each at an
// expected version or any; a refused transaction changes nothing. Its
// histories cannot be partitioned by key, so tests keep them to a few keys
// and clients.
//
// Invariants the recorder relies on and enforces:
//   - every written value is unique in a history, so a read names the one
//     write it observed;
//   - an operation whose outcome is unknown (a timeout, a 503 on a write)
//     keeps its input and gets Return = math.MaxInt64: it may or may not have
//     taken effect, at any time after its call;
//   - a failed read is dropped: it observed nothing.
//
// A check whose search did not finish within its timeout is reported as
// Unknown, and Result.Linearizable is false for it: Unknown is a failure.
package linearize
