package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/placement"
)

const testShards = 4

// cluster is one state machine per shard of a testShards cluster, each
// applying at its own consecutive indexes.
type cluster struct {
	t      testing.TB
	m      placement.Map
	shards []*harness
}

func newCluster(t testing.TB) *cluster {
	m, err := placement.New(testShards)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, m: m}
	for k := range testShards {
		f, err := NewShard(k, testShards)
		if err != nil {
			t.Fatal(err)
		}
		h := &harness{t: t, f: f}
		h.mustApply(noop()) // as a new leader's empty entry: a barrier reads index 1 or more
		c.shards = append(c.shards, h)
	}
	return c
}

// node returns the harness of the shard holding path's node.
func (c *cluster) node(path string) *harness { return c.shards[c.m.Shard(path)] }

// dir returns the harness of the shard holding dir's children.
func (c *cluster) dir(dir string) *harness { return c.shards[c.m.ChildShard(dir)] }

// deleteNode deletes the persistent childless node path, by the close
// protocol where its children would live in another shard.
func (c *cluster) deleteNode(path string) {
	s := c.node(path)
	if c.m.ChildShard(path) == c.m.Shard(path) {
		s.mustApply(del(path))
		return
	}
	mark := s.mustApply(command.Command{Op: command.OpDirMark, Path: path})
	c.dir(path).mustApply(command.Command{Op: command.OpDirClose, Path: path, Incarnation: mark.Node.CreatedIndex})
	s.mustApply(command.Command{Op: command.OpDirDelete, Path: path, Mark: mark.Mark})
}

// foreignTopDir returns a top-level directory whose children live in
// another shard than its node (and than the root's children), and whose
// children's children live in yet another shard than its children if
// nested is set.
func foreignTopDir(t testing.TB, m placement.Map, skip int) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		p := fmt.Sprintf("/d%d", i)
		if m.ChildShard(p) != m.Shard(p) && m.ChildShard(p) != 0 {
			if skip == 0 {
				return p
			}
			skip--
		}
	}
	t.Fatal("no directory with its children in another shard")
	return ""
}

// stateOf renders everything a refusal must leave alone.
func stateOf(f *FSM) string {
	return fmt.Sprintf("%s dirs=%v ending=%v fences=%d/%d sessions=%v", tree(f), dirsOf(f), f.EndingSessions(), f.dirFence, f.sessionFence, f.Sessions())
}

func dirsOf(f *FSM) []dirRecord {
	var list []dirRecord
	f.dirs.Scan(func(r dirRecord) bool { list = append(list, r); return true })
	return list
}

// refused applies c, which must be refused with code and redo, and checks it
// changed nothing but the applied index.
func (h *harness) refused(c command.Command, code api.Code, redo Redo) Result {
	h.t.Helper()
	before := stateOf(h.f)
	r, events := h.apply(c)
	if codeOf(r.Err) != code || r.Redo != redo {
		h.t.Fatalf("apply %v %q: err %v redo %v, want %s redo %v", c.Op, c.Path, r.Err, r.Redo, code, redo)
	}
	if len(events) != 0 {
		h.t.Errorf("refused %v made events %v", c.Op, events)
	}
	if after := stateOf(h.f); after != before {
		h.t.Fatalf("refused %v changed the state:\n%s\nto\n%s", c.Op, before, after)
	}
	return r
}

func TestNewShardValidates(t *testing.T) {
	for _, tt := range []struct{ shard, shards int }{{0, 0}, {-1, 4}, {4, 4}, {0, placement.MaxShards + 1}} {
		if _, err := NewShard(tt.shard, tt.shards); err == nil {
			t.Errorf("NewShard(%d, %d) accepted", tt.shard, tt.shards)
		}
	}
	f, err := NewShard(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if f.Hash() != New().Hash() {
		t.Error("NewShard(0, 1) differs from New()")
	}
	if s, n := f.Shard(); s != 0 || n != 1 {
		t.Errorf("Shard() = %d, %d", s, n)
	}
}

// openPut is a create under dir carrying the open fields.
func openPut(path string, incarnation, observed uint64) command.Command {
	c := put(path, "v")
	c.Incarnation, c.Observed = incarnation, observed
	return c
}

func TestDirectoryOpensOnCreate(t *testing.T) {
	c := newCluster(t)
	p := foreignTopDir(t, c.m, 0)
	s, ch := c.node(p), c.dir(p)
	created := s.mustApply(put(p, "dir")).Node.CreatedIndex

	ch.refused(put(p+"/a", "v"), api.CodeUnavailable, RedoOpenDirectory)
	ch.mustApply(command.Command{Op: command.OpDirClose, Path: p, Incarnation: created}) // a delete that gave up
	ch.refused(openPut(p+"/a", created, ch.f.Applied()-1), api.CodeUnavailable, RedoDirectoryFenced)
	observed := ch.f.Applied()
	r, events := ch.apply(openPut(p+"/a", created, observed))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	openedAt := ch.index
	if len(events) != 2 || events[0].Kind != EventCreated || events[1].Kind != EventChildrenChanged || events[1].Path != p {
		t.Errorf("events %v", events)
	}
	d, err := ch.f.Directory(p)
	if err != nil || !d.Opened || d.Incarnation != created || d.ChildrenCount != 1 || d.Sequence != openedAt {
		t.Fatalf("Directory = %+v, %v; want open, incarnation %d, 1 child, counter %d", d, err, created, openedAt)
	}
	// Under an open record, a create needs nothing more.
	ch.mustApply(put(p+"/b", "v"))
	seq := ch.mustApply(putSequential(p + "/s-")).Node.Path
	if want := sequentialPath(p+"/s-", openedAt); seq != want {
		t.Errorf("first sequential child %q, want %q (the counter starts at the open's index)", seq, want)
	}
	if names, err := ch.f.Children(p); err != nil || len(names) != 3 {
		t.Errorf("Children = %v, %v", names, err)
	}
	// A refusal asking for the open path is not remembered: the retry with
	// the same request_seq applies.
	sid := c.shards[0].mustApply(createSession(1000)).SessionID
	q := foreignTopDir(t, c.m, 1)
	qCreated := c.node(q).mustApply(put(q, "")).Node.CreatedIndex
	plain := withSeq(putEphemeral(q+"/mine", "", sid), sid, 1)
	plain.Observed = c.dir(q).f.Applied()
	c.dir(q).refused(plain, api.CodeUnavailable, RedoOpenDirectory)
	plain.Incarnation = qCreated
	if r := c.dir(q).mustApply(plain); r.Node.Path != q+"/mine" || r.Node.CreatedIndex != c.dir(q).index {
		t.Errorf("the retry on the open path: %+v", r.Node)
	}
	// Another incarnation than the open record's is read again.
	ch.refused(openPut(p+"/c", created+1, ch.f.Applied()), api.CodeUnavailable, RedoDirectoryFenced)
	// The node in S counts none of them.
	if n, _ := s.f.Get(p); n.ChildrenCount != 0 {
		t.Errorf("node %q in its shard counts %d children", p, n.ChildrenCount)
	}
	if _, err := s.f.Directory(p); codeOf(err) != api.CodeInvalidArgument {
		t.Errorf("Directory asked of the node's shard: %v", err)
	}
	for _, h := range c.shards {
		if err := checkShardInvariants(h.f); err != nil {
			t.Error(err)
		}
	}
}

func TestShardedCreateRefusals(t *testing.T) {
	c := newCluster(t)
	p := foreignTopDir(t, c.m, 0)
	root := c.dir("/")
	// A local parent that is missing is created first by the server.
	local := ""
	for i := 0; local == ""; i++ {
		if q := fmt.Sprintf("/l%d", i); c.m.ChildShard(q) == c.m.ChildShard("/") {
			local = q
		}
	}
	root.refused(put(local+"/x", "v"), api.CodeUnavailable, RedoCreateParent)
	root.mustApply(put(local, ""))
	root.mustApply(put(local+"/x", "v"))
	// A shard that does not hold the path refuses it as misrouted.
	other := c.shards[(c.m.ChildShard("/")+1)%testShards]
	other.refused(put("/elsewhere", "v"), api.CodeInternal, RedoNone)
	// No create under an ephemeral node.
	sid := c.shards[0].mustApply(createSession(1000)).SessionID
	if c.m.ChildShard("/") == 0 {
		root.mustApply(putEphemeral("/eph", "", sid))
		root.refused(put("/eph/x", "v"), api.CodeInvalidArgument, RedoNone)
	}
	// No recursive delete, no plain delete of a directory whose children live elsewhere.
	c.node(p).mustApply(put(p, ""))
	c.node(p).refused(delRecursive(p), api.CodeInvalidArgument, RedoNone)
	c.node(p).refused(del(p), api.CodeUnavailable, RedoCloseDirectory)
	root.refused(del(local), api.CodePreconditionFailed, RedoNone) // has a child, as always
}

func TestDirectoryCloseProtocol(t *testing.T) {
	c := newCluster(t)
	p := foreignTopDir(t, c.m, 0)
	s, ch := c.node(p), c.dir(p)
	created := s.mustApply(put(p, "dir")).Node.CreatedIndex
	ch.mustApply(openPut(p+"/a", created, ch.f.Applied()))

	s.refused(command.Command{Op: command.OpDirMark, Path: p, Precondition: command.PrecondVersion, Version: 9}, api.CodePreconditionFailed, RedoNone)
	mark := s.mustApply(command.Command{Op: command.OpDirMark, Path: p, Precondition: command.PrecondVersion, Version: 1})
	if mark.Mark != s.index || mark.Node.CreatedIndex != created {
		t.Fatalf("mark %+v, want mark %d of incarnation %d", mark, s.index, created)
	}
	s.refused(command.Command{Op: command.OpDirMark, Path: p}, api.CodePreconditionFailed, RedoNone) // one delete at a time
	if list := s.f.ClosingDirectories(); len(list) != 1 || list[0] != (ClosingDirectory{Path: p, Mark: mark.Mark, Incarnation: created}) {
		t.Errorf("ClosingDirectories = %+v", list)
	}

	// The close finds a child: refused, fence unchanged; the delete undoes its mark.
	ch.refused(command.Command{Op: command.OpDirClose, Path: p, Incarnation: created}, api.CodePreconditionFailed, RedoNone)
	ch.refused(command.Command{Op: command.OpDirClose, Path: p, Incarnation: created + 1}, api.CodePreconditionFailed, RedoNone)
	s.refused(command.Command{Op: command.OpDirUnmark, Path: p, Mark: mark.Mark + 1}, api.CodePreconditionFailed, RedoNone)
	s.mustApply(command.Command{Op: command.OpDirUnmark, Path: p, Mark: mark.Mark})
	if list := s.f.ClosingDirectories(); len(list) != 0 {
		t.Errorf("ClosingDirectories after the unmark = %+v", list)
	}
	s.refused(command.Command{Op: command.OpDirDelete, Path: p, Mark: mark.Mark}, api.CodePreconditionFailed, RedoNone)

	// Without children: mark, close (the record goes, the fence rises), delete.
	ch.mustApply(del(p + "/a"))
	mark = s.mustApply(command.Command{Op: command.OpDirMark, Path: p})
	observedBefore := ch.f.Applied()
	ch.mustApply(command.Command{Op: command.OpDirClose, Path: p, Incarnation: created})
	if ch.f.DirectoryFence() != ch.index || ch.f.DirectoryCount() != 0 {
		t.Fatalf("after the close: fence %d (want %d), %d records", ch.f.DirectoryFence(), ch.index, ch.f.DirectoryCount())
	}
	// An open that read P before the close is refused by the fence.
	ch.refused(openPut(p+"/late", created, observedBefore), api.CodeUnavailable, RedoDirectoryFenced)
	s.refused(command.Command{Op: command.OpDirDelete, Path: p, Mark: mark.Mark + 1}, api.CodePreconditionFailed, RedoNone)
	r, events := s.apply(command.Command{Op: command.OpDirDelete, Path: p, Mark: mark.Mark})
	if r.Err != nil || len(events) != 2 || events[0].Kind != EventDeleted || events[0].Path != p {
		t.Fatalf("delete if closing: %v, events %v", r.Err, events)
	}
	if _, err := s.f.Get(p); codeOf(err) != api.CodeNotFound {
		t.Errorf("%q after its delete: %v", p, err)
	}
	s.refused(command.Command{Op: command.OpDirMark, Path: p}, api.CodeNotFound, RedoNone)
	// A close where no record exists still raises the fence.
	again := s.mustApply(put(p, "")).Node.CreatedIndex
	ch.mustApply(command.Command{Op: command.OpDirClose, Path: p, Incarnation: again})
	if ch.f.DirectoryFence() != ch.index {
		t.Errorf("a close without a record left the fence at %d, want %d", ch.f.DirectoryFence(), ch.index)
	}
	// A re-created directory counts sequential names from its new open, above every old one.
	ch.mustApply(openPut(p+"/s-", again, ch.f.Applied()))
	if n := ch.mustApply(putSequential(p + "/s-")).Node.Path; n <= sequentialPath(p+"/s-", created) {
		t.Errorf("sequential name %q after re-creation", n)
	}
}

func TestCloseProtocolRefusedWhereItDoesNotApply(t *testing.T) {
	h := newHarness(t) // one shard: a node always counts its children
	h.mustApply(put("/d", ""))
	h.refused(command.Command{Op: command.OpDirMark, Path: "/d"}, api.CodeInternal, RedoNone)
	h.refused(command.Command{Op: command.OpDirClose, Path: "/d", Incarnation: 1}, api.CodeInternal, RedoNone)
	h.refused(command.Command{Op: command.OpDirDelete, Path: "/d", Mark: 1}, api.CodeInternal, RedoNone)
	h.refused(command.Command{Op: command.OpSessionsEnded, Sessions: []uint64{1}}, api.CodeInternal, RedoNone)
	h.refused(command.Command{Op: command.OpSessionsCleaned, Sessions: []uint64{1}}, api.CodeInternal, RedoNone)

	c := newCluster(t)
	p := foreignTopDir(t, c.m, 0)
	c.node(p).mustApply(putEphemeral(p, "", c.shards[0].mustApply(createSession(1000)).SessionID))
	if c.m.Shard(p) == 0 {
		c.node(p).refused(command.Command{Op: command.OpDirMark, Path: p}, api.CodeInvalidArgument, RedoNone)
	}
	c.dir(p).refused(command.Command{Op: command.OpDirClose, Path: p}, api.CodeInvalidArgument, RedoNone)
}

// sessionShard returns a shard other than 0 and a directory whose node and
// children both live there, made in it.
func sessionShard(t testing.TB, c *cluster) (*harness, string) {
	t.Helper()
	for i := 0; i < 10000; i++ {
		p := fmt.Sprintf("/d%d/e", i)
		if k := c.m.ChildShard(p); k != 0 && c.m.Shard(p) == k {
			h := c.shards[k]
			parent := api.Parent(p)
			c.node(parent).mustApply(put(parent, ""))
			h.mustApply(openPut(p, c.node(parent).f.Applied(), h.f.Applied()))
			return h, p
		}
	}
	t.Fatal("no directory living with its children outside shard 0")
	return nil, ""
}

func TestSessionsAcrossShards(t *testing.T) {
	c := newCluster(t)
	meta := c.shards[0]
	k, dir := sessionShard(t, c)
	sid := meta.mustApply(createSession(1000)).SessionID
	other := meta.mustApply(createSession(1000)).SessionID

	k.refused(putEphemeral(dir+"/x", "", sid), api.CodeInternal, RedoNone) // no observed index
	observed := k.f.Applied()
	eph := putEphemeral(dir+"/x", "", sid)
	eph.Observed = observed
	k.mustApply(eph)
	mine := withSeq(putEphemeral(dir+"/y", "", other), other, 1)
	mine.Observed = observed
	k.mustApply(mine)
	if got := len(k.f.Sessions()); got != 2 {
		t.Fatalf("shard keeps %d local session records, want 2", got)
	}

	// The session ends in shard 0: it leaves the table, enters the ending list.
	meta.mustApply(closeSession(sid))
	if list := meta.f.EndingSessions(); len(list) != 1 || list[0].ID != sid || list[0].Ended != meta.index {
		t.Fatalf("ending list %v", list)
	}
	meta.refused(command.Command{Op: command.OpSessionCreate, SessionID: sid, TimeoutMs: 1}, api.CodePreconditionFailed, RedoNone)

	// Its cleanup in k deletes its ephemerals and raises the fence.
	r, events := k.apply(command.Command{Op: command.OpSessionsEnded, Sessions: []uint64{sid, 12345}})
	if r.Err != nil || len(events) != 2 || events[0].Path != dir+"/x" || events[0].Kind != EventDeleted {
		t.Fatalf("sessions ended: %v, events %v", r.Err, events)
	}
	if k.f.SessionFence() != k.index {
		t.Errorf("session fence %d, want %d", k.f.SessionFence(), k.index)
	}
	if _, ok := k.f.sessions.Get(session{id: sid}); ok {
		t.Error("the ended session's local record survived its cleanup")
	}
	// A create checked before the end is refused, and not remembered.
	late := withSeq(putEphemeral(dir+"/late", "", other), other, 2)
	late.Observed = observed
	k.refused(late, api.CodeUnavailable, RedoSessionFenced)
	late.Observed = k.f.Applied()
	if r := k.mustApply(late); r.Node.Path != dir+"/late" {
		t.Fatalf("the retry with the same request_seq: %+v", r)
	}
	again := late
	again.Observed = k.f.Applied()
	if r, events := k.apply(again); r.Err != nil || len(events) != 0 || r.Node.CreatedIndex != k.index-1 {
		t.Errorf("a second retry: %v, %v, %+v; want the remembered result", r.Err, events, r.Node)
	}

	// Confirmed in every shard: the list drops it.
	meta.mustApply(command.Command{Op: command.OpSessionsCleaned, Sessions: []uint64{sid, 777}})
	if list := meta.f.EndingSessions(); len(list) != 0 {
		t.Errorf("ending list after cleaned: %v", list)
	}
	// Sessions and members are shard 0's only.
	k.refused(createSession(1000), api.CodeInternal, RedoNone)
	k.refused(closeSession(other), api.CodeInternal, RedoNone)
	k.refused(setMember(1, "n1"), api.CodeInternal, RedoNone)
	meta.refused(command.Command{Op: command.OpSessionsEnded, Sessions: []uint64{other}}, api.CodeInternal, RedoNone)
	if err := checkShardInvariants(k.f); err != nil {
		t.Error(err)
	}
}

func TestIdleLocalSessionRecordGoes(t *testing.T) {
	c := newCluster(t)
	k, dir := sessionShard(t, c)
	sid := c.shards[0].mustApply(createSession(1000)).SessionID
	eph := putEphemeral(dir+"/x", "", sid)
	eph.Observed = k.f.Applied()
	k.mustApply(eph)
	d := delAs(del(dir+"/x"), sid)
	d.Observed = k.f.Applied()
	k.mustApply(d)
	if n := len(k.f.Sessions()); n != 0 {
		t.Errorf("%d local session records after the session's last node went, want 0", n)
	}
}

func TestShardSnapshotRoundTrip(t *testing.T) {
	c := buildShardedState(t)
	for k, h := range c.shards {
		data := snapshotBytes(t, h.f)
		if data[len(snapshotMagic)] != snapshotVersion3 {
			t.Fatalf("shard %d written as version %d", k, data[len(snapshotMagic)])
		}
		f, err := ReadShardSnapshot(bytes.NewReader(data), k, testShards)
		if err != nil {
			t.Fatalf("shard %d: %v", k, err)
		}
		if f.Hash() != h.f.Hash() || stateOf(f) != stateOf(h.f) {
			t.Fatalf("shard %d restores to another state", k)
		}
		if _, err := ReadShardSnapshot(bytes.NewReader(data), (k+1)%testShards, testShards); !errors.Is(err, ErrWrongShard) {
			t.Errorf("shard %d read as another shard: %v", k, err)
		}
		if _, err := ReadShardSnapshot(bytes.NewReader(data), k, testShards*2); !errors.Is(err, ErrWrongShard) {
			t.Errorf("shard %d read with another shard count: %v", k, err)
		}
		if _, err := ReadSnapshot(bytes.NewReader(data)); !errors.Is(err, ErrWrongShard) {
			t.Errorf("shard %d read as an unsharded snapshot: %v", k, err)
		}
		for cut := 0; cut < len(data); cut += 1 + len(data)/200 {
			if _, err := ReadShardSnapshot(bytes.NewReader(data[:cut]), k, testShards); !errors.Is(err, ErrCorruptSnapshot) {
				t.Fatalf("shard %d cut at %d: %v", k, cut, err)
			}
		}
	}
	// An unsharded snapshot is shard 0 of 1, and only that.
	old := snapshotBytes(t, buildState(t, snapshotStates[removedState].setup).f)
	if _, err := ReadShardSnapshot(bytes.NewReader(old), 0, testShards); !errors.Is(err, ErrWrongShard) {
		t.Errorf("a version-2 snapshot read as shard 0 of %d: %v", testShards, err)
	}
	if _, err := ReadShardSnapshot(bytes.NewReader(old), 0, 1); err != nil {
		t.Errorf("a version-2 snapshot read as shard 0 of 1: %v", err)
	}
}

// buildShardedState makes every kind of version-3 state: directory records,
// closing marks, fences, local session records with windows, ending
// sessions.
func buildShardedState(t testing.TB) *cluster {
	c := newCluster(t)
	meta := c.shards[0]
	k, dir := sessionShard(t, c)
	sid := meta.mustApply(createSession(1000)).SessionID
	gone := meta.mustApply(createSession(1000)).SessionID
	for i, id := range []uint64{sid, gone} {
		w := withSeq(putEphemeral(fmt.Sprintf("%s/e%d", dir, i), "", id), id, 1)
		w.Observed = k.f.Applied()
		k.mustApply(w)
	}
	meta.mustApply(closeSession(gone))
	k.mustApply(command.Command{Op: command.OpSessionsEnded, Sessions: []uint64{gone}})
	for i := 0; i < 3; i++ {
		p := foreignTopDir(t, c.m, i)
		created := c.node(p).mustApply(put(p, "x")).Node.CreatedIndex
		c.dir(p).mustApply(openPut(p+"/a", created, c.dir(p).f.Applied()))
		seq := c.dir(p).mustApply(putSequential(p + "/s-")).Node.Path
		if i == 1 {
			c.node(p).mustApply(command.Command{Op: command.OpDirMark, Path: p})
		}
		if i == 2 {
			c.dir(p).mustApply(del(p + "/a"))
			c.deleteNode(seq)
			c.dir(p).mustApply(command.Command{Op: command.OpDirClose, Path: p, Incarnation: created})
		}
	}
	return c
}

func FuzzReadShardSnapshot(f *testing.F) {
	c := buildShardedState(f)
	for _, h := range c.shards {
		data := snapshotBytes(f, h.f)
		f.Add(data, uint8(0))
		f.Add(unsealFrames(data), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		if mode%2 == 1 { // behind valid checksums
			data = handMade(snapshotVersion3, splitFrames(data)...)
		}
		for k := range testShards {
			fsm, err := ReadShardSnapshot(bytes.NewReader(data), k, testShards)
			if err != nil {
				if !errors.Is(err, ErrWrongShard) {
					corruptOffset(t, err)
				}
				continue
			}
			if err := checkShardInvariants(fsm); err != nil {
				t.Fatalf("accepted a state breaking invariants: %v", err)
			}
			if again := snapshotBytes(t, fsm); !bytes.HasPrefix(data, again) {
				t.Fatalf("accepted input does not serialise back to itself")
			}
		}
	})
}

// checkShardInvariants verifies one shard's invariants from scratch: every
// node's parent is a node here or has a directory record here, counts of
// children (of nodes and records) are exact, owners are local sessions and
// the owner index is exact.
func checkShardInvariants(f *FSM) error {
	if !f.shard.sharded() {
		return checkInvariants(f)
	}
	if err := checkNodeCache(f); err != nil {
		return err
	}
	if _, ok := f.lookup("/"); !ok {
		return errors.New("no root")
	}
	children := map[string]int{}
	owned := map[uint64]int{}
	var errs []error
	f.nodes.Scan(func(e entry) bool {
		if e.path == "/" {
			return true
		}
		dir := api.Parent(e.path)
		if !f.holdsChildrenOf(dir) {
			errs = append(errs, fmt.Errorf("%s holds %q of another shard", f.shard, e.path))
		}
		if f.holdsNode(dir) {
			if parent, ok := f.lookup(dir); !ok || parent.owner != 0 {
				errs = append(errs, fmt.Errorf("%q has no persistent parent", e.path))
			}
		} else if _, ok := f.dirs.Get(dirRecord{path: dir}); !ok {
			errs = append(errs, fmt.Errorf("%q has no directory record", e.path))
		}
		children[dir]++
		if e.owner != 0 {
			owned[e.owner]++
			if _, ok := f.owners.Get(ownerKey{owner: e.owner, path: e.path}); !ok {
				errs = append(errs, fmt.Errorf("ephemeral %q missing from the owner index", e.path))
			}
			if _, ok := f.sessions.Get(session{id: e.owner}); !ok {
				errs = append(errs, fmt.Errorf("ephemeral %q of unknown session %d", e.path, e.owner))
			}
		}
		return true
	})
	f.nodes.Scan(func(e entry) bool {
		want := children[e.path]
		if !f.holdsChildrenOf(e.path) {
			want = 0
		}
		if e.children != want {
			errs = append(errs, fmt.Errorf("%q counts %d children, has %d", e.path, e.children, want))
		}
		return true
	})
	f.dirs.Scan(func(r dirRecord) bool {
		if r.children != children[r.path] {
			errs = append(errs, fmt.Errorf("record %q counts %d children, has %d", r.path, r.children, children[r.path]))
		}
		return true
	})
	total := 0
	f.sessions.Scan(func(s session) bool {
		if s.ephemerals != owned[s.id] {
			errs = append(errs, fmt.Errorf("session %d counts %d ephemerals, owns %d", s.id, s.ephemerals, owned[s.id]))
		}
		total += s.ephemerals
		return true
	})
	if f.owners.Len() != total {
		errs = append(errs, fmt.Errorf("owner index has %d entries, sessions own %d", f.owners.Len(), total))
	}
	return errors.Join(errs...)
}

// TestVersion2CommandsApplyAsBefore checks that entries of format version 2
// (logs written before sharding) apply exactly as the same commands of the
// current format: version 3 changed no rule. (States made with proposal
// times are left out: version 2 has no TimeMs.)
func TestVersion2CommandsApplyAsBefore(t *testing.T) {
	for _, tt := range snapshotStates {
		if slices.ContainsFunc(tt.setup, func(c command.Command) bool { return c.TimeMs != 0 }) {
			continue
		}
		current := buildState(t, tt.setup)
		old := newHarness(t)
		for _, c := range tt.setup {
			encoded := c.Marshal()
			encoded[0] = command.FormatV2
			decoded, err := command.Unmarshal(encoded)
			if err != nil {
				t.Fatal(err)
			}
			old.apply(decoded)
		}
		if old.f.Hash() != current.f.Hash() {
			t.Errorf("%s: version-2 entries reach another state", tt.name)
		}
	}
}

// TestShardedTxnRefusals: a transaction's refused operation keeps its
// Redo (the server takes the step, or says why a transaction cannot),
// and a transaction refused after a create under an open directory record
// leaves the record as it was (its children count and counter).
func TestShardedTxnRefusals(t *testing.T) {
	c := newCluster(t)
	p := foreignTopDir(t, c.m, 0)
	s, ch := c.node(p), c.dir(p)
	created := s.mustApply(put(p, "dir")).Node.CreatedIndex

	ch.refused(txn(txnCreate(p+"/a", "v")), api.CodeUnavailable, RedoOpenDirectory)
	ch.mustApply(openPut(p+"/a", created, ch.f.Applied()))
	ch.refused(txn(txnCreate(p+"/b", "v"), txnCreate(p+"/a", "again")), api.CodePreconditionFailed, RedoNone)
	ch.refused(txn(txnCreate(p+"/s-", "v"), txnDelete(p+"/missing")), api.CodeNotFound, RedoNone)
	if d, err := ch.f.Directory(p); err != nil || d.ChildrenCount != 1 {
		t.Fatalf("Directory = %+v, %v; want the one child /a", d, err)
	}
	if err := checkShardInvariants(ch.f); err != nil {
		t.Error(err)
	}
}
