package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/raftnode"
	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
	"github.com/latch-io/latch/internal/wal"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder is a Listener that logs every call, with what it could see of the
// replica at that moment: whether the state's lock was free and the
// published applied index.
type recorder struct {
	name string
	r    *Replica
	mu   *sync.Mutex
	log  *[]string
}

func (l recorder) note(what string) {
	free := l.r.mu.TryRLock()
	if free {
		l.r.mu.RUnlock()
	}
	l.mu.Lock()
	*l.log = append(*l.log, fmt.Sprintf("%s %s locked=%v applied=%d", l.name, what, !free, l.r.Applied()))
	l.mu.Unlock()
}

func (l recorder) AppliedLocked(cmd *command.Command, _ fsm.Result) {
	l.note("AppliedLocked " + cmd.Op.String())
}
func (l recorder) PublishLocked(events []fsm.Event) {
	l.note(fmt.Sprintf("PublishLocked %d events", len(events)))
}
func (l recorder) Applied(events []fsm.Event)          { l.note(fmt.Sprintf("Applied %d events", len(events))) }
func (l recorder) RestoredLocked(_ *fsm.FSM, i uint64) { l.note(fmt.Sprintf("RestoredLocked %d", i)) }
func (l recorder) Restored(i uint64)                   { l.note(fmt.Sprintf("Restored %d", i)) }
func (l recorder) LeaderChanging(lead, _ uint64) {
	l.note(fmt.Sprintf("LeaderChanging %d published=%d", lead, l.r.Leader()))
}
func (l recorder) LeaderChanged(lead, _ uint64) {
	l.note(fmt.Sprintf("LeaderChanged %d published=%d", lead, l.r.Leader()))
}

// mustNew returns New(cfg) or fails the test.
func mustNew(t *testing.T, cfg Config) *Replica {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newRecorded returns a Replica with two recording listeners, a and b.
func newRecorded(t *testing.T) (*Replica, func() []string) {
	t.Helper()
	var (
		mu  sync.Mutex
		log []string
	)
	a := &recorder{name: "a", mu: &mu, log: &log}
	b := &recorder{name: "b", mu: &mu, log: &log}
	r := mustNew(t, Config{Self: 1, Group: 1, Listeners: []Listener{a, b}, Logger: quiet, MaxPending: 10, RequestTimeout: time.Second})
	a.r, b.r = r, r
	return r, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(log)
	}
}

func entry(index uint64, cmd *command.Command) raftpb.Entry {
	return raftpb.Entry{Index: index, Term: 1, Data: cmd.Marshal()}
}

// TestApplyOrder pins the apply order the package comment states: each
// command's AppliedLocked under the write lock, the batch's PublishLocked
// under it, Applied after it is released and before the applied index is
// published, then the waiters, which find the index published. Listeners
// are called in registration order at each step.
func TestApplyOrder(t *testing.T) {
	r, log := newRecorded(t)
	id, ch := r.waiters.add()
	put := &command.Command{ID: id, Op: command.OpPut, Path: "/a", Value: []byte("x")}
	del := &command.Command{Op: command.OpDelete, Path: "/a"}
	// Four events: /a created and its parent's children changed, then the
	// same for its deletion.
	if err := r.Apply([]raftpb.Entry{entry(1, put), entry(2, del)}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a AppliedLocked put locked=true applied=0",
		"b AppliedLocked put locked=true applied=0",
		"a AppliedLocked delete locked=true applied=0",
		"b AppliedLocked delete locked=true applied=0",
		"a PublishLocked 4 events locked=true applied=0",
		"b PublishLocked 4 events locked=true applied=0",
		"a Applied 4 events locked=false applied=0",
		"b Applied 4 events locked=false applied=0",
	}
	if got := log(); !slices.Equal(got, want) {
		t.Fatalf("listener calls:\n got %q\nwant %q", got, want)
	}
	select {
	case o := <-ch:
		if o.index != 1 || o.err != nil || o.result.Node.Path != "/a" {
			t.Fatalf("waiter got %+v, want the put's result at index 1", o)
		}
	default:
		t.Fatal("the put's waiter was not answered")
	}
	if r.Applied() != 2 {
		t.Fatalf("applied %d after the batch, want 2", r.Applied())
	}
}

// TestApplyStopsAtUndecodableEntry: the entries before an undecodable one
// are applied and published, none after, and the error names the entry.
func TestApplyStopsAtUndecodableEntry(t *testing.T) {
	r, log := newRecorded(t)
	entries := []raftpb.Entry{
		entry(1, &command.Command{Op: command.OpPut, Path: "/before"}),
		{Index: 2, Term: 1, Data: []byte{0xff, 0xff, 0xff}},
		entry(3, &command.Command{Op: command.OpPut, Path: "/after"}),
	}
	err := r.Apply(entries)
	var undecodable *UndecodableEntryError
	if !errors.As(err, &undecodable) || !errors.Is(err, ErrUndecodableEntry) || undecodable.Index != 2 || undecodable.Group != 1 {
		t.Fatalf("Apply returned %v, want an UndecodableEntryError at index 2", err)
	}
	if r.Applied() != 1 {
		t.Fatalf("applied %d, want 1 (the entry before the undecodable one)", r.Applied())
	}
	var before, after error
	r.View(func(f *fsm.FSM) {
		_, before = f.Get("/before")
		_, after = f.Get("/after")
	})
	if before != nil || after == nil {
		t.Fatalf("/before: %v, /after: %v; want only /before applied", before, after)
	}
	if got := log(); len(got) != 6 {
		t.Fatalf("listener calls %q, want the first entry's only (6)", got)
	}
}

// TestVoidExpiry: an expiry entry decided in another term than its entry's
// changes nothing, tells no listener, and answers its waiter ErrVoidExpiry.
func TestVoidExpiry(t *testing.T) {
	r, log := newRecorded(t)
	create := &command.Command{Op: command.OpSessionCreate, SessionID: 7, TimeoutMs: 1000}
	id, ch := r.waiters.add()
	expire := &command.Command{ID: id, Op: command.OpSessionExpire, Sessions: []uint64{7}, LeaderTerm: 3}
	if err := r.Apply([]raftpb.Entry{entry(1, create), entry(2, expire)}); err != nil {
		t.Fatal(err)
	}
	if o := <-ch; !errors.Is(o.err, ErrVoidExpiry) {
		t.Fatalf("expiry waiter got %v, want ErrVoidExpiry", o.err)
	}
	var err error
	r.View(func(f *fsm.FSM) { _, err = f.Session(7) })
	if err != nil {
		t.Fatalf("session 7 after a void expiry: %v", err)
	}
	for _, call := range log() {
		if call == "a AppliedLocked session_expire locked=true applied=0" {
			t.Fatal("a void expiry reached the listeners")
		}
	}
}

// TestLeaderChangeOrder: LeaderChanging runs before the new leader is
// published, LeaderChanged after; losing a known leader fails the waiters.
func TestLeaderChangeOrder(t *testing.T) {
	r, log := newRecorded(t)
	r.LeaderChanged(1, 2)
	_, ch := r.waiters.add()
	r.LeaderChanged(2, 3)
	want := []string{
		"a LeaderChanging 1 published=0 locked=false applied=0",
		"b LeaderChanging 1 published=0 locked=false applied=0",
		"a LeaderChanged 1 published=1 locked=false applied=0",
		"b LeaderChanged 1 published=1 locked=false applied=0",
		"a LeaderChanging 2 published=1 locked=false applied=0",
		"b LeaderChanging 2 published=1 locked=false applied=0",
		"a LeaderChanged 2 published=2 locked=false applied=0",
		"b LeaderChanged 2 published=2 locked=false applied=0",
	}
	if got := log(); !slices.Equal(got, want) {
		t.Fatalf("listener calls:\n got %q\nwant %q", got, want)
	}
	if o := <-ch; api.CodeOf(o.err) != api.CodeUnavailable {
		t.Fatalf("a waiter across a leader change got %v, want 503", o.err)
	}
	if r.Term() != 3 {
		t.Fatalf("term %d, want 3", r.Term())
	}
}

// TestRestoreOrder: RestoredLocked under the lock, then the index is
// published, pending waiters fail, and Restored runs last.
func TestRestoreOrder(t *testing.T) {
	src, _ := newRecorded(t)
	if err := src.Apply([]raftpb.Entry{entry(5, &command.Command{Op: command.OpPut, Path: "/snapped"})}); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(src.Snapshot()(pw)) }()

	r, log := newRecorded(t)
	_, ch := r.waiters.add()
	if err := r.Restore(snap.Meta{Index: 5, Term: 1}, pr); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a RestoredLocked 5 locked=true applied=0",
		"b RestoredLocked 5 locked=true applied=0",
		"a Restored 5 locked=false applied=5",
		"b Restored 5 locked=false applied=5",
	}
	if got := log(); !slices.Equal(got, want) {
		t.Fatalf("listener calls:\n got %q\nwant %q", got, want)
	}
	if o := <-ch; api.CodeOf(o.err) != api.CodeUnavailable {
		t.Fatalf("a waiter across a restore got %v, want 503", o.err)
	}
	var err error
	r.View(func(f *fsm.FSM) { _, err = f.Get("/snapped") })
	if err != nil {
		t.Fatalf("restored state lacks /snapped: %v", err)
	}
}

// startSingle starts a one-member group over the in-memory filesystem and
// the fake transport, with the given listeners, and waits for it to lead.
func startSingle(t *testing.T, rec *recorder) *Replica {
	t.Helper()
	fs := vfs.NewMem()
	w, recovered, err := wal.Open(fs, "/wal", wal.Options{SegmentSize: 1 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snap.New(fs, "/snap", snap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	network := transport.NewNetwork(1)
	stop := make(chan struct{})
	r := mustNew(t, Config{
		Self: 1, Group: 1, RequestTimeout: 5 * time.Second, ElectionTimeout: 50 * time.Millisecond,
		MaxPending: 100, Listeners: []Listener{rec}, Logger: quiet, Stop: stop,
	})
	rec.r = r
	node, err := raftnode.Start(raftnode.Config{
		ID: 1, Group: 1, Peers: []raft.Peer{BootstrapPeer(command.Member{ID: 1, Name: "n1", PeerURL: "127.0.0.1:1"})},
		Recovered: recovered[1], WAL: w, Snapshots: snaps, Transport: network.Join(1, nopHandler{}, nil),
		Machine: r, Observer: r, Logger: quiet, TickInterval: 5 * time.Millisecond, ElectionTicks: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Attach(node)
	done := make(chan struct{})
	go func() { r.RunReads(); close(done) }()
	t.Cleanup(func() {
		close(stop)
		node.Stop()
		<-done
		network.Close()
		w.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for r.Leader() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the single member did not lead within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r
}

type nopHandler struct{}

func (nopHandler) Process(context.Context, uint64, raftpb.Message) error            { return nil }
func (nopHandler) ReceivePeer(context.Context, uint64, transport.PeerMessage) error { return nil }
func (nopHandler) ReportUnreachable(uint64, uint64)                                 {}
func (nopHandler) ReportSnapshot(uint64, uint64, raft.SnapshotStatus)               {}

// TestProposeAndReadBack: over a running raft node, a proposal returns its
// result once applied here, with the listeners already told and the index
// published; a linearizable barrier afterwards sees it; the member record of
// the bootstrap conf change is in the state.
func TestProposeAndReadBack(t *testing.T) {
	var (
		mu  sync.Mutex
		log []string
	)
	rec := &recorder{name: "l", mu: &mu, log: &log}
	r := startSingle(t, rec)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, index, err := r.Propose(ctx, &command.Command{Op: command.OpPut, Path: "/k", Value: []byte("v")})
	if err != nil || res.Err != nil {
		t.Fatalf("propose: %v / %v", err, res.Err)
	}
	if r.Applied() < index {
		t.Fatalf("Propose returned at applied %d, before its index %d was published", r.Applied(), index)
	}
	mu.Lock()
	applied := false
	for _, call := range log {
		var events int
		var at uint64
		if _, err := fmt.Sscanf(call, "l Applied %d events locked=false applied=%d", &events, &at); err == nil && events > 0 && at < index {
			applied = true
		}
	}
	mu.Unlock()
	if !applied {
		t.Fatalf("listener calls %q lack the put's Applied before index %d was published", log, index)
	}
	if err := r.Barrier(ctx, api.Linearizable, 0); err != nil {
		t.Fatal(err)
	}
	var (
		node   fsm.NodeMeta
		gerr   error
		member command.Member
	)
	r.View(func(f *fsm.FSM) {
		n, err := f.Get("/k")
		node, gerr = n.NodeMeta, err
		member, _ = f.Member(1)
	})
	if gerr != nil || node.Path != "/k" {
		t.Fatalf("read back /k: %+v, %v", node, gerr)
	}
	if member.Name != "n1" {
		t.Fatalf("member 1 recorded as %+v, want n1 from the bootstrap conf change", member)
	}
	if err := r.Barrier(ctx, api.Linearizable, index+1000); api.CodeOf(err) != api.CodeInvalidArgument {
		t.Fatalf("a barrier beyond the commit index returned %v, want invalid_argument", err)
	}
}

// TestAnnouncementKeepsConfChangeRole: a member record proposed in a normal
// entry (a member announcing its addresses) takes its addresses from the
// proposal but its role from the member table, which conf changes own; one
// for an id the table does not hold changes nothing and is refused.
func TestAnnouncementKeepsConfChangeRole(t *testing.T) {
	r, _ := newRecorded(t)
	self := command.Member{ID: 1, Name: "n1", PeerURL: "127.0.0.1:7101"}
	addLearner := raftpb.ConfChangeV2{
		Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode, NodeID: 1}},
		Context: encodeConfContext(confContext{Member: self}),
	}
	if err := r.ApplyConfChange(1, addLearner, raftpb.ConfState{Learners: []uint64{1}}); err != nil {
		t.Fatal(err)
	}
	announced := self
	announced.ClientURL = "http://127.0.0.1:7001"
	announced.Learner = false // the announcer had not applied its learner conf change yet
	id, ch := r.waiters.add()
	stranger := command.Member{ID: 9, Name: "n9", PeerURL: "127.0.0.1:7109", ClientURL: "http://127.0.0.1:7009"}
	strangerID, strangerCh := r.waiters.add()
	entries := []raftpb.Entry{
		entry(2, &command.Command{ID: id, Op: command.OpMemberSet, Member: announced}),
		entry(3, &command.Command{ID: strangerID, Op: command.OpMemberSet, Member: stranger}),
	}
	if err := r.Apply(entries); err != nil {
		t.Fatal(err)
	}
	if o := <-ch; o.err != nil {
		t.Fatalf("announcement answered %v", o.err)
	}
	if o := <-strangerCh; !errors.Is(o.err, ErrNoMemberRecord) {
		t.Fatalf("record for an id that is no member answered %v, want ErrNoMemberRecord", o.err)
	}
	var got command.Member
	var recorded, strangerRecorded bool
	r.View(func(f *fsm.FSM) {
		got, recorded = f.Member(1)
		_, strangerRecorded = f.Member(9)
	})
	if !recorded || !got.Learner || got.ClientURL != announced.ClientURL {
		t.Fatalf("member 1 is %+v (recorded %v), want a learner with client URL %s", got, recorded, announced.ClientURL)
	}
	if strangerRecorded {
		t.Fatal("a proposed record added member 9, which no conf change added")
	}
	if r.Applied() != 3 {
		t.Fatalf("applied %d, want 3", r.Applied())
	}
}

func TestReplicaHoldsItsShardAndRestoresOnlyItsSnapshots(t *testing.T) {
	r := mustNew(t, Config{Self: 1, Group: 2, Shard: 1, Shards: 4, Logger: quiet, MaxPending: 10, RequestTimeout: time.Second})
	r.View(func(f *fsm.FSM) {
		if shard, shards := f.Shard(); shard != 1 || shards != 4 {
			t.Fatalf("the state machine is shard %d of %d, want 1 of 4", shard, shards)
		}
	})
	snapshotOf := func(f *fsm.FSM) *bytes.Reader {
		var b bytes.Buffer
		if err := f.WriteSnapshot(&b); err != nil {
			t.Fatal(err)
		}
		return bytes.NewReader(b.Bytes())
	}
	if err := r.Restore(snap.Meta{Group: 2, Index: 1, Term: 1}, snapshotOf(fsm.New())); !errors.Is(err, fsm.ErrWrongShard) {
		t.Fatalf("restoring the snapshot of a single-shard cluster: %v, want fsm.ErrWrongShard", err)
	}
	other, err := fsm.NewShard(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore(snap.Meta{Group: 2, Index: 1, Term: 1}, snapshotOf(other)); !errors.Is(err, fsm.ErrWrongShard) {
		t.Fatalf("restoring shard 2's snapshot into shard 1: %v, want fsm.ErrWrongShard", err)
	}
	own, err := fsm.NewShard(1, 4)
	if err != nil {
		t.Fatal(err)
	}
	own.Advance(7)
	if err := r.Restore(snap.Meta{Group: 2, Index: 7, Term: 1}, snapshotOf(own)); err != nil {
		t.Fatalf("restoring its own shard's snapshot: %v", err)
	}
	if r.Applied() != 7 {
		t.Fatalf("applied %d after the restore, want 7", r.Applied())
	}
	if _, err := New(Config{Group: 9, Shard: 4, Shards: 4}); err == nil {
		t.Fatal("a replica of shard 4 of 4 was made")
	}
}
