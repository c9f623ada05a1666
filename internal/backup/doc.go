// Package backup owns latch's backup file: a consistent copy of a member's
// replicated state, one section per consensus group (shard), each the state
// machine at one applied index in internal/fsm's snapshot encoding.
//
// It writes the file (Write, fed by the server's GET /v1/snapshot) and
// verifies and reads it back (Verify, Open), for `latchctl snapshot save`
// and `snapshot status` and for the restore that seeds a new cluster from a
// file (`latchd --restore-from`, internal/server).
//
// Invariants:
//   - a file Verify accepts is exactly what Write wrote: every byte is under
//     a checksum (the header's, each chunk's section CRC, the trailer's CRC
//     of the whole file), and a truncated file lacks its trailer;
//   - section k of a file of N sections decodes (fsm.ReadShardSnapshot of
//     shard k of N) to a state whose applied
//     index, node and session counts are those the header announces;
//   - an error about the input is a *CorruptError naming the file and the
//     byte offset, never a panic; reading never allocates more than a fixed
//     bound per chunk whatever a length field claims.
package backup
