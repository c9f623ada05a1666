// Package fencing enforces latch fencing tokens in the storage a lock or an
// election protects.
//
// A lock alone cannot protect a resource from a holder that paused (GC,
// SIGSTOP, VM migration) past its session timeout: the lock moved on, but the
// old holder still believes it holds it. latch hands every holder a fencing
// token, the raft index of its queue node, strictly increasing across
// successive holders. The resource must then refuse any write whose token is
// lower than one it already accepted. That refusal is what this package does.
//
// # The rule
//
// A Guard remembers, per resource name, the highest token it accepted.
// Accept(resource, token) succeeds when token >= that highest (equal: the
// same holder writing again) and records it; a lower token fails with an
// error matching ErrStaleToken and changes nothing. Check is Accept without
// recording.
//
// # Plugging it into a store
//
// The Guard's decision and the protected write must be atomic with respect to
// other writers of the same resource; otherwise a stale holder could pass
// Accept, be overtaken by the new holder's write, and then land its own. Do
// one of:
//
//   - Call Accept inside the store's own critical section or transaction,
//     immediately before applying the write, and apply it only if Accept
//     returned nil. With a database, keep the highest token in the same
//     transaction instead (UPDATE ... WHERE token <= $new) and use a Guard only
//     for the cases without one.
//   - Put Middleware in front of an HTTP handler. It serializes the requests
//     of each resource, so Accept and the handler run as one step per
//     resource, and it reads the token from the Latch-Fencing-Token header.
//
// Which Guard: NewMemory forgets everything at restart, so it protects only
// storage that also forgets (a cache); after a restart it accepts any token
// once. NewFile persists every newly accepted highest token (fsynced before
// Accept returns) so a restarted store keeps refusing stale holders.
//
// Typical use, with a lock from client/recipe:
//
//	token, _ := lock.Acquire(ctx)
//	req.Header.Set("Latch-Fencing-Token", strconv.FormatUint(token, 10))
//
// and on the storage side:
//
//	guard, err := fencing.NewFile("/var/lib/mystore/fencing.log")
//	http.Handle("/objects/", fencing.Middleware(guard, objectName, objectsHandler))
//
// # Durable file format
//
// The file starts with an 8-byte magic and holds one record per accepted
// raise of a resource's highest token: a 12-byte header (payload length,
// CRC-32C of the length, CRC-32C of the payload; little endian) and a payload
// of the 8-byte token and the resource name. A record cut short, or zero
// bytes, at the very end of the file are the tail of a write a crash
// interrupted and are dropped at open; anything else that does not check out
// is corruption, reported with the file name and offset. When the log holds
// many superseded records it is rewritten (temp file, fsync, rename, fsync of
// the directory).
package fencing
