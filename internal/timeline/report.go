package timeline

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Event is one recorded mark: when (Unix nanoseconds) and which stage.
type Event struct {
	At    int64
	Stage Stage
}

// Parse reads a file written by Dump; name is used in errors, which give
// the line.
func Parse(r io.Reader, name string) ([]Event, error) {
	var events []Event
	scanner := bufio.NewScanner(r)
	for line := 1; scanner.Scan(); line++ {
		at, stage, ok := strings.Cut(scanner.Text(), " ")
		n, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil || len(stage) != 1 {
			return nil, fmt.Errorf("timeline: %s line %d: want \"NANOSECONDS STAGE\", got %q", name, line, scanner.Text())
		}
		events = append(events, Event{At: n, Stage: Stage(stage[0])})
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("timeline: read %s: %w", name, err)
	}
	return events, nil
}

// Step is one row of a breakdown: a stage on one member, and how long after
// the leader's Propose it was reached, over the writes it was seen in.
type Step struct {
	Member        string // "leader", "follower 1", ...
	Stage         Stage
	P50, P90, P99 time.Duration
	Writes        int
}

// Breakdown lines the followers' marks up against the leader's proposals,
// one write at a time: for each Propose on the leader, until the next, the
// first mark of each leader stage; on each follower, the first
// AppendStepped after the leader's Sent and what followed it (the frame
// read just before, its Ready, queue, save and acknowledgement); and the
// leader's first AckStepped after the earliest follower's SaveEnd. On a
// client port that marks them, the request's read is the last RequestRead
// since the previous proposal (a negative offset), and its reply's write
// the first ReplyFlushed after the proposer was answered. Writes missing a
// leader stage (a Ready that carried another write) are skipped.
func Breakdown(leader []Event, followers [][]Event) []Step {
	type key struct {
		member int // 0 leader, i follower i
		stage  Stage
	}
	offsets := map[key][]time.Duration{}
	var order []key
	add := func(k key, d time.Duration) {
		if _, ok := offsets[k]; !ok {
			order = append(order, k)
		}
		offsets[k] = append(offsets[k], d)
	}
	proposals := indexesOf(leader, Propose)
	for j := 0; j+1 < len(proposals); j++ {
		window := leader[proposals[j]:proposals[j+1]]
		start, end := window[0].At, leader[proposals[j+1]].At
		first := firstOf(window[1:])
		if !hasAll(first, ReadyTaken, Sent, SaveStart, SaveEnd, ApplyStart, ApplyEnd, Answered) {
			continue
		}
		for _, s := range []Stage{ReadyTaken, Sent, WriterTook, WriterFlushed, SaveStart, SaveEnd} {
			if at, ok := first[s]; ok {
				add(key{0, s}, time.Duration(at-start))
			}
		}
		earliestSaved := int64(-1)
		for i, f := range followers {
			marks := followerMarks(f, first[Sent], end)
			for _, s := range []Stage{FrameRead, AppendStepped, ReadyTaken, AppendQueued, SaveStart, SaveEnd, WriterTook, WriterFlushed} {
				if at, ok := marks[s]; ok {
					add(key{i + 1, s}, time.Duration(at-start))
				}
			}
			if at, ok := marks[SaveEnd]; ok && (earliestSaved < 0 || at < earliestSaved) {
				earliestSaved = at
			}
		}
		if earliestSaved >= 0 {
			if at, ok := firstAfter(window, AckStepped, earliestSaved); ok {
				add(key{0, AckStepped}, time.Duration(at-start))
			}
		}
		for _, s := range []Stage{ApplyStart, ApplyEnd, Answered} {
			add(key{0, s}, time.Duration(first[s]-start))
		}
		since := 0
		if j > 0 {
			since = proposals[j-1] + 1
		}
		if at, ok := lastOf(leader[since:proposals[j]], RequestRead); ok {
			add(key{0, RequestRead}, time.Duration(at-start))
		}
		if at, ok := firstAfter(window, ReplyFlushed, first[Answered]); ok {
			add(key{0, ReplyFlushed}, time.Duration(at-start))
		}
	}
	steps := make([]Step, 0, len(order))
	for _, k := range order {
		d := offsets[k]
		slices.Sort(d)
		member := "leader"
		if k.member > 0 {
			member = fmt.Sprintf("follower %d", k.member)
		}
		steps = append(steps, Step{Member: member, Stage: k.stage,
			P50: d[len(d)/2], P90: d[len(d)*9/10], P99: d[len(d)*99/100], Writes: len(d)})
	}
	sort.SliceStable(steps, func(a, b int) bool { return steps[a].P50 < steps[b].P50 })
	return steps
}

// followerMarks finds a follower's handling of the entries the leader sent
// at sent: its first AppendStepped in (sent, end), the FrameRead just
// before it, and the first of each later stage until end.
func followerMarks(events []Event, sent, end int64) map[Stage]int64 {
	i := sort.Search(len(events), func(i int) bool { return events[i].At > sent })
	marks := map[Stage]int64{}
	for ; i < len(events) && events[i].At < end; i++ {
		e := events[i]
		if _, ok := marks[AppendStepped]; !ok {
			if e.Stage == FrameRead {
				marks[FrameRead] = e.At
			}
			if e.Stage == AppendStepped {
				marks[AppendStepped] = e.At
			}
			continue
		}
		if _, ok := marks[e.Stage]; ok {
			continue
		}
		switch e.Stage {
		case WriterTook, WriterFlushed:
			if _, saved := marks[SaveEnd]; !saved {
				continue // the acknowledgement is sent after the save
			}
		}
		marks[e.Stage] = e.At
	}
	if _, ok := marks[AppendStepped]; !ok {
		return nil
	}
	return marks
}

func indexesOf(events []Event, s Stage) []int {
	var at []int
	for i, e := range events {
		if e.Stage == s {
			at = append(at, i)
		}
	}
	return at
}

func firstOf(events []Event) map[Stage]int64 {
	first := map[Stage]int64{}
	for _, e := range events {
		if _, ok := first[e.Stage]; !ok {
			first[e.Stage] = e.At
		}
	}
	return first
}

func firstAfter(events []Event, s Stage, after int64) (int64, bool) {
	for _, e := range events {
		if e.Stage == s && e.At > after {
			return e.At, true
		}
	}
	return 0, false
}

func lastOf(events []Event, s Stage) (int64, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Stage == s {
			return events[i].At, true
		}
	}
	return 0, false
}

func hasAll(first map[Stage]int64, stages ...Stage) bool {
	for _, s := range stages {
		if _, ok := first[s]; !ok {
			return false
		}
	}
	return true
}

// String names the stage.
func (s Stage) String() string {
	if name, ok := stageNames[s]; ok {
		return name
	}
	return fmt.Sprintf("stage %q", byte(s))
}

var stageNames = map[Stage]string{
	Propose:       "proposed",
	ReadyTaken:    "Ready taken",
	Sent:          "messages handed to the transport",
	WriterTook:    "peer writer took a message",
	WriterFlushed: "peer writer wrote the socket",
	FrameRead:     "frame read from the socket",
	AppendStepped: "MsgApp stepped into raft",
	AppendQueued:  "append queued",
	SaveStart:     "WAL save began",
	SaveEnd:       "WAL save returned",
	AckStepped:    "follower's ack stepped",
	ApplyStart:    "apply began",
	ApplyEnd:      "apply ended",
	Answered:      "proposer answered",
	RequestRead:   "client port read the request",
	ReplyFlushed:  "client port wrote the reply",
}
