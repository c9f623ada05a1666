// Package wal owns latch's write-ahead log: one log per server process,
// shared by all its consensus groups, holding raft entries, hard states and
// snapshot markers tagged with a group id.
//
// # Durability
//
// Save returns only after its records are fsynced. Concurrent Save calls
// share one write and one fsync (group commit): the first caller becomes the
// leader, writes every queued call as one flush, fsyncs, wakes the others,
// and hands leadership to the next waiter. A write or fsync error fails the
// WAL for good; it is never retried (fsyncgate: after a failed fsync the page
// cache may have dropped the dirty pages, so a retry can "succeed" without
// the data).
//
// # A full disk
//
// Segments are preallocated, so a flush writes only into space the
// filesystem already gave the log. The only calls that can meet a full
// filesystem (ENOSPC, EDQUOT) are those that get more space: creating and
// preallocating the next segment, or growing a segment for a flush larger
// than it. Both come before any byte of the flush is written, so Save then
// returns ErrNoSpace, having written nothing: the WAL does not fail, the
// queued state returns to the written one, a segment that could not be
// preallocated is removed, and the same call may be made again (it succeeds
// once space was freed). Any other error, and any error of a write or an
// fsync, is still sticky.
//
// # On disk
//
// The log is a directory of segment files named by a 16-hex-digit sequence
// number, "0000000000000001.wal", each preallocated to Options.SegmentSize.
// Every record is framed (see record.go) with its payload length, a CRC32C of
// the payload and a CRC32C of the header. A segment is:
//
//	segment header record: magic, version, sequence, and a checkpoint of
//	                       every group (snapshot marker, last index, hard state)
//	flush*:                a flush record giving the length of the body that
//	                       follows, then the records of one group commit
//	zeros:                 the preallocated, unwritten rest (with
//	                       Options.ZeroAhead, the first megabytes of it
//	                       written with zeros: zeroahead.go)
//
// A new segment is created only after the previous one is durable, and the
// directory is fsynced before anything in the new segment is acknowledged.
// Open always starts a new segment; the previous last segment is first
// truncated at the end of its valid log and fsynced.
//
// # Recovery rules
//
// Only the last flush of the last segment can be a torn write, since every
// earlier flush was fsynced before the next was written. Damage there (a
// record failing a checksum, or running past the end of the file) is torn,
// and the flush is dropped whole, if the damaged flush overlaps a 512-byte
// sector that is entirely zero or runs past the end of the file, and no valid
// record follows it; a crash leaves exactly that (unwritten sectors of the
// preallocated file read as zeros), while a bit flip in written data does
// not. Anything else, anywhere else, is corruption: Open refuses with a
// *CorruptError naming the file and byte offset (errors.Is ErrCorrupt).
// Segment sequence numbers must be contiguous, and a group's entries must
// continue from the checkpoint of the first segment, so a missing segment is
// detected. A later segment's checkpoint of a group must equal what the
// preceding segments replay to; replay learns of a group only from its
// records, so the writer checkpoints only groups it wrote a record of (a
// batch with no marker, no entry and an empty hard state leaves its group
// unknown), and the reader takes an empty checkpoint of a group it has not
// met as agreeing (an unwritten group has nothing).
//
// # Replay
//
// Records are applied in log order with raft's rules: an entry at index i
// replaces the group's entries at i and above; a snapshot marker drops
// entries at or below its index; the last non-empty hard state wins.
//
// # Release
//
// Release(group, index) says a durable snapshot covers the group's entries
// up to index. A segment is deleted when, for every group, the highest entry
// index it holds is released; segments go oldest first, each removal fsynced
// before the next.
package wal
