package fsm

import (
	"bytes"
	"hash/crc64"
	"os"
	"reflect"
	"testing"

	"github.com/latch-io/latch/internal/command"
)

func setMember(id uint64, name string) command.Command {
	return command.Command{Op: command.OpMemberSet, Member: command.Member{ID: id, Name: name, PeerURL: "http://" + name}}
}

func removeMember(id uint64) command.Command {
	return command.Command{Op: command.OpMemberRemove, Member: command.Member{ID: id}}
}

func member(id uint64, name string) command.Member {
	return setMember(id, name).Member
}

func TestApplyMemberRemovalIsRemembered(t *testing.T) {
	tests := []struct {
		name        string
		cmds        []command.Command
		wantMembers []command.Member
		wantRemoved []command.Member
	}{
		{
			name:        "a removal records the member as it was",
			cmds:        []command.Command{setMember(1, "n1"), setMember(2, "n2"), removeMember(2)},
			wantMembers: []command.Member{member(1, "n1")},
			wantRemoved: []command.Member{member(2, "n2")},
		},
		{
			name:        "a learner is recorded as one",
			cmds:        []command.Command{{Op: command.OpMemberSet, Member: command.Member{ID: 4, Name: "n4", PeerURL: "127.0.0.1:2399", Learner: true}}, removeMember(4)},
			wantRemoved: []command.Member{{ID: 4, Name: "n4", PeerURL: "127.0.0.1:2399", Learner: true}},
		},
		{
			name:        "the removal of an id that is no member records the id",
			cmds:        []command.Command{setMember(1, "n1"), removeMember(7)},
			wantMembers: []command.Member{member(1, "n1")},
			wantRemoved: []command.Member{{ID: 7}},
		},
		{
			name:        "a repeated removal keeps the first record",
			cmds:        []command.Command{setMember(2, "n2"), removeMember(2), removeMember(2)},
			wantRemoved: []command.Member{member(2, "n2")},
		},
		{
			name:        "a member added again leaves the removed set",
			cmds:        []command.Command{setMember(2, "n2"), removeMember(2), setMember(2, "n2b")},
			wantMembers: []command.Member{member(2, "n2b")},
		},
		{
			name:        "removed again after that, it is recorded anew",
			cmds:        []command.Command{setMember(2, "n2"), removeMember(2), setMember(2, "n2b"), removeMember(2)},
			wantRemoved: []command.Member{member(2, "n2b")},
		},
		{
			name:        "the set is sorted by id",
			cmds:        []command.Command{removeMember(9), setMember(3, "n3"), setMember(5, "n5"), removeMember(5), removeMember(3), removeMember(1)},
			wantRemoved: []command.Member{{ID: 1}, member(3, "n3"), member(5, "n5"), {ID: 9}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			for _, c := range tt.cmds {
				if r, events := h.apply(c); r.Err != nil || events != nil {
					t.Fatalf("apply %+v: %+v, %v", c, r, events)
				}
			}
			if got := h.f.Members(); !reflect.DeepEqual(got, tt.wantMembers) {
				t.Errorf("members %+v, want %+v", got, tt.wantMembers)
			}
			if got := h.f.RemovedMembers(); !reflect.DeepEqual(got, tt.wantRemoved) {
				t.Errorf("removed %+v, want %+v", got, tt.wantRemoved)
			}
			for _, m := range tt.wantRemoved {
				if got, ok := h.f.RemovedMember(m.ID); !ok || got != m {
					t.Errorf("RemovedMember(%d) = %+v, %v; want %+v", m.ID, got, ok, m)
				}
			}
			for _, m := range tt.wantMembers {
				if got, ok := h.f.RemovedMember(m.ID); ok {
					t.Errorf("member %d is also reported removed: %+v", m.ID, got)
				}
			}
		})
	}
}

func TestRemovedMemberLookups(t *testing.T) {
	h := buildState(t, []command.Command{setMember(1, "n1"), setMember(4, "n4"), setMember(6, "n6"), removeMember(4), removeMember(6), removeMember(8)})
	tests := []struct {
		name   string
		lookup func() (command.Member, bool)
		want   command.Member
		found  bool
	}{
		{"by id", func() (command.Member, bool) { return h.f.RemovedMember(4) }, member(4, "n4"), true},
		{"by name", func() (command.Member, bool) { return h.f.RemovedMemberNamed("n6") }, member(6, "n6"), true},
		{"by the id of a removal of no member", func() (command.Member, bool) { return h.f.RemovedMember(8) }, command.Member{ID: 8}, true},
		{"a live member by id", func() (command.Member, bool) { return h.f.RemovedMember(1) }, command.Member{}, false},
		{"a live member by name", func() (command.Member, bool) { return h.f.RemovedMemberNamed("n1") }, command.Member{}, false},
		{"an unknown id", func() (command.Member, bool) { return h.f.RemovedMember(5) }, command.Member{}, false},
		{"an unknown name", func() (command.Member, bool) { return h.f.RemovedMemberNamed("n5") }, command.Member{}, false},
		{"the empty name", func() (command.Member, bool) { return h.f.RemovedMemberNamed("") }, command.Member{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found := tt.lookup()
			if got != tt.want || found != tt.found {
				t.Errorf("got %+v, %v; want %+v, %v", got, found, tt.want, tt.found)
			}
		})
	}
}

func TestCloneSharesNoRemovedSetChanges(t *testing.T) {
	h := buildState(t, []command.Command{setMember(1, "n1"), setMember(2, "n2"), removeMember(1)})
	clone := h.f.Clone()
	h.apply(removeMember(2))
	h.apply(setMember(1, "n1"))
	if got, want := clone.RemovedMembers(), []command.Member{member(1, "n1")}; !reflect.DeepEqual(got, want) {
		t.Errorf("clone's removed set %+v after the original changed, want %+v", got, want)
	}
	if got, want := h.f.RemovedMembers(), []command.Member{member(2, "n2")}; !reflect.DeepEqual(got, want) {
		t.Errorf("original's removed set %+v, want %+v", got, want)
	}
}

// version1Snapshot is testdata/snapshot/version1.snap: a snapshot the
// version-1 snapshot writer made of members n1 and n2 (n3 was removed, which
// version 1 did not record), sessions and sequence counters.
const (
	version1SnapshotFile    = "testdata/snapshot/version1.snap"
	version1SnapshotHash    = 0x47ea0739551b9968 // that binary's Hash of the state
	version1SnapshotApplied = 17
)

func TestReadVersion1Snapshot(t *testing.T) {
	data, err := os.ReadFile(version1SnapshotFile)
	if err != nil {
		t.Fatal(err)
	}
	if crc64.Checksum(data, crc64Table) != version1SnapshotHash {
		t.Fatalf("%s is not the file the version-1 binary wrote", version1SnapshotFile)
	}
	f := restore(t, data)
	if err := checkInvariants(f); err != nil {
		t.Fatalf("invariants: %v", err)
	}
	if f.Applied() != version1SnapshotApplied || len(f.RemovedMembers()) != 0 || f.SessionCount() != 2 {
		t.Errorf("applied %d, removed %+v, %d sessions", f.Applied(), f.RemovedMembers(), f.SessionCount())
	}
	want := []command.Member{{ID: 1, Name: "n1", PeerURL: "http://p1"}, {ID: 2, Name: "n2", PeerURL: "http://p2", ClientURL: "http://c2", Learner: true}}
	if !reflect.DeepEqual(f.Members(), want) {
		t.Errorf("members %+v, want %+v", f.Members(), want)
	}
	again := snapshotBytes(t, f)
	if again[len(snapshotMagic)] != snapshotVersion {
		t.Errorf("a state read from version 1 is written as version %d", again[len(snapshotMagic)])
	}
	if !bytes.Equal(toVersion1(t, again), data) {
		t.Errorf("the state read from version 1 is not the state written")
	}
	if restore(t, again).Hash() != f.Hash() {
		t.Errorf("its version-2 snapshot restores to another state")
	}
	// A removal applied after the upgrade is remembered from then on.
	f.Apply(f.Applied()+1, ptr(removeMember(2)))
	if _, ok := restore(t, snapshotBytes(t, f)).RemovedMember(2); !ok {
		t.Errorf("a removal applied after reading a version-1 snapshot did not reach the next snapshot")
	}
}

func TestSnapshotKeepsRemovedMembers(t *testing.T) {
	h := buildState(t, []command.Command{setMember(1, "n1"), setMember(4, "n4"), removeMember(4), removeMember(9), put("/a", "v")})
	restored := restore(t, snapshotBytes(t, h.f))
	if got, want := restored.RemovedMembers(), []command.Member{member(4, "n4"), {ID: 9}}; !reflect.DeepEqual(got, want) {
		t.Errorf("restored removed set %+v, want %+v", got, want)
	}
	if m, ok := restored.RemovedMemberNamed("n4"); !ok || m.ID != 4 {
		t.Errorf("RemovedMemberNamed(n4) after restore = %+v, %v", m, ok)
	}
}

// toVersion1 rewrites a version-2 snapshot of a state without removed
// members as the version-1 writer wrote it: the header without the removed
// count, version byte 1.
func toVersion1(t testing.TB, data []byte) []byte {
	t.Helper()
	frames := splitFrames(unsealFrames(data))
	d := payloadDecoder{data: frames[0].payload}
	applied, members, removed, sessions, nodes := d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
	if err := d.finish(); err != nil || frames[0].typ != frameHeader || removed != 0 {
		t.Fatalf("not a version-2 snapshot without removed members: %v", err)
	}
	frames[0].payload = uvarints(applied, members, sessions, nodes)
	return handMade(snapshotVersion1, frames...)
}
