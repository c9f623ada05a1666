// Package timeline records the moments a write passes the stages of the
// replication pipeline on each member, so that the wall time of one write
// can be taken apart (where CPU profiles are blind: waiting for a disk, a
// goroutine wake-up, a peer). It is a measuring tool for benchmarks, not a
// production feature: the recorder is compiled in only with the build tag
// latchtimeline; without it, Mark is an empty function the compiler removes
// and Dump does nothing.
//
// With the tag, a process records every Mark, with the monotonic-enough
// wall clock (all members of a loopback cluster share one clock), into a
// fixed buffer of MaxEvents (later marks are dropped), and Dump writes them
// to the file named by $LATCH_TIMELINE as it stops (latchd calls it). The
// recorder is on only when that variable is set. Breakdown (report.go)
// lines the members' files up against the leader's proposals; the report
// command prints it:
//
//	go build -tags latchtimeline -o /tmp/latchd-timeline ./cmd/latchd
//	LATCH_TIMELINE=/tmp/tl/n1 /tmp/latchd-timeline ...   # each member its own file
//	go run ./internal/timeline/report /tmp/tl/LEADER /tmp/tl/FOLLOWER1 /tmp/tl/FOLLOWER2
//
// The stages are meaningful for one write at a time (one client): the
// report attributes to each proposal the first mark of each stage after it.
package timeline

// Stage is one point of the write pipeline (docs/benchmarks.md, "One write's
// wall time").
type Stage byte

// The stages, in the order a write meets them. Leader: RequestRead (on a
// client port that marks it: the ZooKeeper port), Propose, ReadyTaken,
// Sent, WriterTook, WriterFlushed, SaveStart, SaveEnd, AckStepped,
// ApplyStart, ApplyEnd, Answered, ReplyFlushed. Follower: FrameRead, AppendStepped,
// ReadyTaken, AppendQueued, SaveStart, SaveEnd, WriterTook, WriterFlushed.
const (
	Propose       Stage = 'P' // replica.Propose entered (the request was parsed)
	ReadyTaken    Stage = 'R' // the Ready loop took a Ready with new entries
	Sent          Stage = 'S' // that Ready's messages were handed to the transport
	WriterTook    Stage = 'D' // a peer's writer goroutine took a queued message
	WriterFlushed Stage = 'F' // ... and wrote its batch to the socket
	FrameRead     Stage = 'I' // a peer frame was read off a connection
	AppendStepped Stage = 'M' // a MsgApp carrying entries was stepped into raft
	AppendQueued  Stage = 'Q' // a MsgStorageAppend was queued for the append goroutine
	SaveStart     Stage = 'W' // the append goroutine began a WAL save (write + fsync)
	SaveEnd       Stage = 'V' // ... which returned
	AckStepped    Stage = 'A' // a peer's MsgAppResp was stepped into raft
	ApplyStart    Stage = 'X' // the Ready loop began applying committed entries
	ApplyEnd      Stage = 'Z' // ... and finished
	Answered      Stage = 'Y' // the proposer's waiter received its outcome
	RequestRead   Stage = 'r' // a client port read a request's frame
	ReplyFlushed  Stage = 'y' // a client port wrote its buffered replies to the socket
)
