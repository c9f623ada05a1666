package backup

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/testkit/testseed"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: from LATCH_SEED or the clock)")

// state returns a state machine with sessions, ephemeral, sequential and
// plain nodes, values large enough to span several chunks when many.
func state(t *testing.T, keys int, valueSize int) *fsm.FSM {
	t.Helper()
	f := fsm.New()
	index := uint64(0)
	apply := func(c command.Command) fsm.Result {
		index++
		r, _ := f.Apply(index, &c)
		if r.Err != nil {
			t.Fatalf("apply %+v: %v", c, r.Err)
		}
		return r
	}
	apply(command.Command{Op: command.OpMemberSet, Member: command.Member{ID: 7, Name: "m7", PeerURL: "127.0.0.1:1"}})
	apply(command.Command{Op: command.OpSessionCreate, SessionID: 42, TimeoutMs: 5000})
	apply(command.Command{Op: command.OpPut, Path: "/eph", Value: []byte("e"), Ephemeral: true, SessionID: 42})
	for i := range keys {
		apply(command.Command{Op: command.OpPut, Path: fmt.Sprintf("/k/%06d", i), Value: bytes.Repeat([]byte{byte(i)}, valueSize)})
	}
	apply(command.Command{Op: command.OpPut, Path: "/seq/n-", Sequential: true})
	return f
}

// shardState returns the state machine of shard 1 of 2: keys nodes under a
// directory whose node lives in shard 0 (so shard 1 holds its directory
// record), an ephemeral one of session 42 and a sequential one.
func shardState(t *testing.T, keys int, valueSize int) *fsm.FSM {
	t.Helper()
	const shard, shards = 1, 2
	f, err := fsm.NewShard(shard, shards)
	if err != nil {
		t.Fatal(err)
	}
	m, err := placement.New(shards)
	if err != nil {
		t.Fatal(err)
	}
	dir := ""
	for i := 0; dir == ""; i++ {
		if d := fmt.Sprintf("/d%d", i); m.ChildShard(d) == shard && m.Shard(d) != shard {
			dir = d
		}
	}
	apply := func(c command.Command) {
		c.Observed, c.Incarnation = f.Applied(), 1
		if r, _ := f.Apply(f.Applied()+1, &c); r.Err != nil {
			t.Fatalf("apply %+v: %v", c, r.Err)
		}
	}
	f.Advance(1)
	apply(command.Command{Op: command.OpPut, Path: dir + "/eph", Value: []byte("e"), Ephemeral: true, SessionID: 42})
	for i := range keys {
		apply(command.Command{Op: command.OpPut, Path: fmt.Sprintf("%s/%06d", dir, i), Value: bytes.Repeat([]byte{byte(i)}, valueSize)})
	}
	apply(command.Command{Op: command.OpPut, Path: dir + "/n-", Sequential: true})
	return f
}

// metaShardState returns the state machine of shard 0 of 2: a member and
// session 42.
func metaShardState(t *testing.T) *fsm.FSM {
	t.Helper()
	f, err := fsm.NewShard(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []command.Command{
		{Op: command.OpMemberSet, Member: command.Member{ID: 7, Name: "m7", PeerURL: "127.0.0.1:1"}},
		{Op: command.OpSessionCreate, SessionID: 42, TimeoutMs: 5000},
	} {
		if r, _ := f.Apply(uint64(i+1), &c); r.Err != nil {
			t.Fatalf("apply %+v: %v", c, r.Err)
		}
	}
	return f
}

func writeFile(t *testing.T, states ...*fsm.FSM) []byte {
	t.Helper()
	h := Header{TokenHash: TokenHash("old"), TakenAtUnixMs: 1234, Member: "m7"}
	var sections []Section
	for i, f := range states {
		group := uint64(i + 1)
		h.Shards = append(h.Shards, Shard{Group: group, Index: f.Applied(), Term: 3,
			NodeCount: uint64(f.NodeCount()), SessionCount: uint64(f.SessionCount())})
		sections = append(sections, Section{Group: group, WriteBody: f.Clone().WriteSnapshot})
	}
	var out bytes.Buffer
	if err := Write(&out, h, sections); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestRoundTripHoldsEveryShard(t *testing.T) {
	small, large := metaShardState(t), shardState(t, 3000, 700) // large spans several 1 MiB chunks
	data := writeFile(t, small, large)
	contents, err := Read(bytes.NewReader(data), "f")
	if err != nil {
		t.Fatal(err)
	}
	if len(contents.States) != 2 || contents.Size != int64(len(data)) || contents.Header.Member != "m7" {
		t.Fatalf("read %d states, size %d of %d, member %q", len(contents.States), contents.Size, len(data), contents.Header.Member)
	}
	for i, want := range []*fsm.FSM{small, large} {
		if got := contents.States[i]; got.Hash() != want.Hash() {
			t.Errorf("shard %d: the state read back differs from the one written", i+1)
		}
	}
	if contents.Header.MaxIndex() != large.Applied() {
		t.Errorf("MaxIndex %d, want %d", contents.Header.MaxIndex(), large.Applied())
	}
	// A section must hold the state of its own shard.
	swapped := writeFile(t, large, small)
	var corrupt *CorruptError
	if _, err := Read(bytes.NewReader(swapped), "f"); !errors.As(err, &corrupt) || !strings.Contains(err.Error(), "not shard 0 of 2") {
		t.Fatalf("a file whose sections are in the wrong order: %v, want a *CorruptError naming the shard", err)
	}
}

// TestDamageIsRefusedWithFileAndOffset: every truncation and random byte
// flips are refused with a *CorruptError naming the file and an offset
// within it, never a panic.
func TestDamageIsRefusedWithFileAndOffset(t *testing.T) {
	data := writeFile(t, state(t, 40, 30))
	check := func(what string, damaged []byte) {
		t.Helper()
		_, err := Read(bytes.NewReader(damaged), "damaged.file")
		var corrupt *CorruptError
		if !errors.As(err, &corrupt) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: got %v, want a *CorruptError", what, err)
		}
		if corrupt.File != "damaged.file" || corrupt.Offset < 0 || corrupt.Offset > int64(len(damaged)) ||
			!strings.Contains(err.Error(), "damaged.file at byte offset") {
			t.Fatalf("%s: %v: want the file named and an offset in [0, %d]", what, err, len(damaged))
		}
	}
	for n := range len(data) {
		check(fmt.Sprintf("truncated to %d bytes", n), data[:n])
	}
	check("a byte appended", append(bytes.Clone(data), 0))
	rng := rand.New(rand.NewPCG(testseed.Pick(t, *seedFlag, "LATCH_SEED"), 0))
	for range 2000 {
		at, bit := rng.IntN(len(data)), byte(1)<<rng.IntN(8)
		damaged := bytes.Clone(data)
		damaged[at] ^= bit
		check(fmt.Sprintf("bit %d of byte %d flipped", bit, at), damaged)
	}
}

func TestHeaderMustMatchTheSections(t *testing.T) {
	f := state(t, 5, 5)
	h := Header{Member: "m", Shards: []Shard{{Group: 1, Index: f.Applied(), NodeCount: uint64(f.NodeCount()) + 1}}}
	var out bytes.Buffer
	if err := Write(&out, h, []Section{{Group: 1, WriteBody: f.WriteSnapshot}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(&out, "f"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "the header says") {
		t.Fatalf("a header announcing another node count: %v, want refused", err)
	}
	if err := Write(&out, h, []Section{{Group: 2, WriteBody: f.WriteSnapshot}}); err == nil {
		t.Fatal("Write of a section of another group than the header's succeeded")
	}
	if err := Write(&out, Header{}, nil); err == nil {
		t.Fatal("Write of no shard succeeded")
	}
}

func TestWriteErrorLeavesNoTrailer(t *testing.T) {
	f := state(t, 5, 5)
	h := Header{Shards: []Shard{{Group: 1, Index: f.Applied()}}}
	var out bytes.Buffer
	failing := func(io.Writer) error { return errors.New("disk gone") }
	err := Write(&out, h, []Section{{Group: 1, WriteBody: func(w_ io.Writer) error { return failing(w_) }}})
	if err == nil {
		t.Fatal("Write succeeded though a body failed")
	}
	if _, err := Read(&out, "cut"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reading what a failed Write left: %v, want refused", err)
	}
}
