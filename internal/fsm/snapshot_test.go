package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"testing"

	"github.com/latch-io/latch/internal/command"
)

// snapshotStates are the states the round-trip, corruption and fuzz tests
// start from.
var snapshotStates = []struct {
	name  string
	setup []command.Command
}{
	{"empty", nil},
	{"root value", []command.Command{put("/", "root")}},
	{"tree", []command.Command{put("/a/b/c", "x"), put("/a/b0", "y"), put("/ab", ""), put("/a/b/c", "z"), put("/zz/"+string(bytes.Repeat([]byte("k"), 300)), "long")}},
	{"sessions", []command.Command{
		createSession(1000), createSession(2000), putEphemeral("/locks/R/a", "1", 1), putEphemeral("/e", "2", 2),
		withSeq(putSequential("/locks/R/lock-"), 1, 1), withSeq(putVersion("/x", "", 7), 1, 2), withSeq(put("/y", "v"), 2, 9),
		closeSession(2), createSession(3000),
	}},
	{"members and counters", []command.Command{
		{Op: command.OpMemberSet, Member: command.Member{ID: 2, Name: "n2", PeerURL: "http://p2", ClientURL: "http://c2", Learner: true}},
		{Op: command.OpMemberSet, Member: command.Member{ID: 1, Name: "n1", PeerURL: "http://p1"}},
		putSequential("/q/s-"), putSequential("/q/s-"), del("/q/s-0000000001"), noop(),
	}},
	{"removed members", []command.Command{
		setMember(1, "n1"), setMember(2, "n2"), {Op: command.OpMemberSet, Member: command.Member{ID: 4, Name: "n4", PeerURL: "127.0.0.1:2399", Learner: true}},
		removeMember(4), removeMember(9), createSession(1000), putEphemeral("/e", "x", 1),
	}},
	{"times", []command.Command{
		stamped(put("/a/b", "x"), 1000), put("/old", "unstamped"), createSession(1000), stamped(putEphemeral("/a/e", "y", 3), 1001),
		stamped(put("/a/b", "z"), 1002), stamped(del("/a/b"), 1003), stamped(put("/old", "now stamped"), 1004),
	}},
}

// removedState is the index in snapshotStates of a state with every kind of
// frame.
const removedState = 5

func buildState(t testing.TB, setup []command.Command) *harness {
	h := newHarness(t)
	for _, c := range setup {
		h.apply(c) // refusals are part of some states (remembered results)
	}
	return h
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, tt := range snapshotStates {
		t.Run(tt.name, func(t *testing.T) {
			h := buildState(t, tt.setup)
			data := snapshotBytes(t, h.f)
			restored := restore(t, data)
			if restored.Hash() != h.f.Hash() || restored.Applied() != h.f.Applied() {
				t.Fatalf("restored hash/applied %x/%d, want %x/%d", restored.Hash(), restored.Applied(), h.f.Hash(), h.f.Applied())
			}
			if !bytes.Equal(snapshotBytes(t, restored), data) {
				t.Errorf("restored state serialises differently")
			}
			if tree(restored) != tree(h.f) || !reflect.DeepEqual(restored.Sessions(), h.f.Sessions()) || !reflect.DeepEqual(restored.Members(), h.f.Members()) ||
				!reflect.DeepEqual(restored.RemovedMembers(), h.f.RemovedMembers()) {
				t.Errorf("restored state differs:\n%s\nwant\n%s", tree(restored), tree(h.f))
			}
			if err := checkInvariants(restored); err != nil {
				t.Errorf("invariants: %v", err)
			}
			// Both continue identically: counters, owners and windows survived.
			next := []command.Command{putSequential("/q/s-"), closeSession(1), withSeq(putSequential("/locks/R/lock-"), 1, 1), put("/a/b/c", "w")}
			for i, c := range next {
				index := h.f.Applied() + uint64(i) + 1
				r1, e1 := h.f.Apply(index, &c)
				r2, e2 := restored.Apply(index, &c)
				if !reflect.DeepEqual(r1, r2) || !reflect.DeepEqual(e1, e2) {
					t.Errorf("after restore, %+v gives %+v %v, want %+v %v", c, r2, e2, r1, e1)
				}
			}
		})
	}
}

func TestSnapshotSequenceCounterSurvives(t *testing.T) {
	h := buildState(t, []command.Command{putSequential("/q/s-"), putSequential("/q/s-"), del("/q/s-0000000002")})
	restored := restore(t, snapshotBytes(t, h.f))
	r, _ := restored.Apply(h.index+1, ptr(putSequential("/q/s-")))
	if r.Node.Path != "/q/s-0000000003" {
		t.Errorf("sequential create after restore made %q, want /q/s-0000000003", r.Node.Path)
	}
}

// TestHashCoversState checks that each part of the replicated state changes
// the hash.
func TestHashCoversState(t *testing.T) {
	base := []command.Command{createSession(1000), put("/a", "v"), withSeq(put("/b", ""), 1, 1)}
	tests := []struct {
		name   string
		change func(f *FSM)
	}{
		{"applied index", func(f *FSM) { f.Advance(f.Applied() + 1) }},
		{"value", func(f *FSM) { e, _ := f.lookup("/a"); f.edit(&e).value = []byte("w"); f.storeNode(e) }},
		{"version", func(f *FSM) { e, _ := f.lookup("/a"); f.edit(&e).version++; f.storeNode(e) }},
		{"sequence counter", func(f *FSM) { e, _ := f.lookup("/"); f.edit(&e).sequence++; f.storeNode(e) }},
		{"session timeout", func(f *FSM) { s, _ := f.sessions.Get(session{id: 1}); s.timeoutMs++; f.sessions.Set(s) }},
		{"remembered result", func(f *FSM) { f.remember(1, 2, Result{}) }},
		{"member", func(f *FSM) { f.setMember(command.Member{ID: 1}) }},
		{"removed member", func(f *FSM) { f.removeMember(9) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := buildState(t, base)
			before := h.f.Hash()
			tt.change(h.f)
			if h.f.Hash() == before {
				t.Errorf("changing the %s left the hash unchanged", tt.name)
			}
		})
	}
}

var offsetPattern = regexp.MustCompile(`offset (\d+)`)

// corruptOffset checks that err is a corruption error naming an offset and
// returns the offset.
func corruptOffset(t *testing.T, err error) int {
	t.Helper()
	if !errors.Is(err, ErrCorruptSnapshot) {
		t.Fatalf("error %v does not wrap ErrCorruptSnapshot", err)
	}
	m := offsetPattern.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("error %q names no offset", err)
	}
	offset, _ := strconv.Atoi(m[1])
	return offset
}

// damagedInputs are snapshots, of both versions, that the truncation and
// bit-flip tests damage.
func damagedInputs(t *testing.T) map[string][]byte {
	version1, err := os.ReadFile(version1SnapshotFile)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"sessions":         snapshotBytes(t, buildState(t, snapshotStates[3].setup).f),
		"removed members":  snapshotBytes(t, buildState(t, snapshotStates[removedState].setup).f),
		"version 1 golden": version1,
		"transactions":     snapshotBytes(t, txnState(t).f),
	}
}

func TestSnapshotTruncatedAnywhere(t *testing.T) {
	for name, data := range damagedInputs(t) {
		t.Run(name, func(t *testing.T) {
			for n := 0; n < len(data); n++ {
				_, err := ReadSnapshot(bytes.NewReader(data[:n]))
				if offset := corruptOffset(t, err); offset > n {
					t.Errorf("truncated at %d: error names offset %d beyond the data", n, offset)
				}
			}
		})
	}
}

func TestSnapshotBitFlipAnywhere(t *testing.T) {
	for name, data := range damagedInputs(t) {
		t.Run(name, func(t *testing.T) {
			for i := range data {
				for _, bit := range []byte{0x01, 0x80} {
					flipped := bytes.Clone(data)
					flipped[i] ^= bit
					_, err := ReadSnapshot(bytes.NewReader(flipped))
					if err == nil {
						t.Fatalf("flipping bit %#x of byte %d went unnoticed", bit, i)
					}
					corruptOffset(t, err)
				}
			}
		})
	}
}

func TestSnapshotBitFlipNamesItsFrame(t *testing.T) {
	h := buildState(t, []command.Command{put("/a", "0123456789"), put("/b", "abcdefghij")})
	data := snapshotBytes(t, h.f)
	at := bytes.Index(data, []byte("abcdefghij"))
	frameStart := bytes.LastIndexByte(data[:at], frameNode)
	data[at+3] ^= 0x20
	_, err := ReadSnapshot(bytes.NewReader(data))
	if offset := corruptOffset(t, err); offset != frameStart {
		t.Errorf("error %v names offset %d, want the frame start %d", err, offset, frameStart)
	}
}

// frameSpec is a frame of a hand-made snapshot (checksums are valid).
type frameSpec struct {
	typ     byte
	payload []byte
}

func handMade(version byte, frames ...frameSpec) []byte {
	var buf bytes.Buffer
	sw := snapshotWriter{w: bufioWriter(&buf)}
	sw.write(append([]byte(snapshotMagic), version))
	for _, fr := range frames {
		sw.frame(fr.typ, func(b []byte) []byte { return append(b, fr.payload...) })
	}
	sw.w.Flush()
	return buf.Bytes()
}

func uvarints(values ...uint64) []byte {
	var b []byte
	for _, v := range values {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

// header is a version-2 header without removed members.
func header(applied, members, sessions, nodes uint64) frameSpec {
	return headerRemoved(applied, members, 0, sessions, nodes)
}

func headerRemoved(applied, members, removed, sessions, nodes uint64) frameSpec {
	return frameSpec{frameHeader, uvarints(applied, members, removed, sessions, nodes)}
}

// header1 is a version-1 header.
func header1(applied, members, sessions, nodes uint64) frameSpec {
	return frameSpec{frameHeader, uvarints(applied, members, sessions, nodes)}
}

func memberFrame(typ byte, m command.Member) frameSpec {
	return frameSpec{typ, appendMember(nil, m)}
}

func nodeFrame(previous, path string, owner, children uint64) frameSpec {
	return frameSpec{frameNode, appendNode(nil, previous, entry{path: path, nodeData: &nodeData{version: 1, owner: owner, children: int(children)}})}
}

var endFrame = frameSpec{frameEnd, nil}

func TestSnapshotRejectsInvalidState(t *testing.T) {
	root := nodeFrame("", "/", 0, 1)
	tests := []struct {
		name string
		data []byte
	}{
		{"empty input", nil},
		{"wrong magic", append([]byte("LATCHFSX"), snapshotVersion)},
		{"unknown version", handMade(9, header(0, 0, 0, 1), nodeFrame("", "/", 0, 0), endFrame)},
		{"no nodes", handMade(snapshotVersion, header(0, 0, 0, 0), endFrame)},
		{"first node is not the root", handMade(snapshotVersion, header(0, 0, 0, 1), nodeFrame("", "/a", 0, 0), endFrame)},
		{"frame of the wrong type", handMade(snapshotVersion, header(0, 0, 0, 1), endFrame)},
		{"missing end frame", handMade(snapshotVersion, header(0, 0, 0, 1), nodeFrame("", "/", 0, 0))},
		{"trailing bytes in a frame", handMade(snapshotVersion, frameSpec{frameHeader, uvarints(0, 0, 0, 0, 1, 5)}, nodeFrame("", "/", 0, 0), endFrame)},
		{"non-minimal integer", handMade(snapshotVersion, frameSpec{frameHeader, []byte{0x80, 0x00, 0, 0, 0, 1}}, nodeFrame("", "/", 0, 0), endFrame)},
		{"children count too high", handMade(snapshotVersion, header(0, 0, 0, 2), nodeFrame("", "/", 0, 2), nodeFrame("/", "/a", 0, 0), endFrame)},
		{"children count too low", handMade(snapshotVersion, header(0, 0, 0, 3), root, nodeFrame("/", "/a", 0, 0), nodeFrame("/a", "/b", 0, 0), endFrame)},
		{"nodes out of order", handMade(snapshotVersion, header(0, 0, 0, 3), nodeFrame("", "/", 0, 2), nodeFrame("/", "/b", 0, 0), nodeFrame("/b", "/a", 0, 0), endFrame)},
		{"duplicate node", handMade(snapshotVersion, header(0, 0, 0, 3), nodeFrame("", "/", 0, 2), nodeFrame("/", "/a", 0, 0), nodeFrame("/a", "/a", 0, 0), endFrame)},
		{"missing parent", handMade(snapshotVersion, header(0, 0, 0, 2), nodeFrame("", "/", 0, 0), nodeFrame("/", "/a/b", 0, 0), endFrame)},
		{"invalid path", handMade(snapshotVersion, header(0, 0, 0, 2), root, nodeFrame("/", "/a\x01", 0, 0), endFrame)},
		{"shared prefix longer than the previous path", handMade(snapshotVersion, header(0, 0, 0, 2), root, frameSpec{frameNode, append(uvarints(5, 1, 'a'), uvarints(0, 1, 0, 0, 0, 0, 0)...)}, endFrame)},
		{"owner is not a session", handMade(snapshotVersion, header(0, 0, 0, 2), root, nodeFrame("/", "/a", 9, 0), endFrame)},
		{"ephemeral node with a child", handMade(snapshotVersion, header(0, 0, 1, 3),
			frameSpec{frameSession, uvarints(9, 100, 0, 0)}, root, nodeFrame("/", "/a", 9, 1), nodeFrame("/a", "/a/b", 0, 0), endFrame)},
		{"sessions out of order", handMade(snapshotVersion, header(0, 0, 2, 1),
			frameSpec{frameSession, uvarints(9, 100, 0, 0)}, frameSpec{frameSession, uvarints(9, 100, 0, 0)}, nodeFrame("", "/", 0, 0), endFrame)},
		{"remembered request outside the window", handMade(snapshotVersion, header(0, 0, 1, 1),
			frameSpec{frameSession, append(uvarints(9, 100, 500, 1, 200), appendResult(nil, Result{})...)}, nodeFrame("", "/", 0, 0), endFrame)},
		{"window without requests", handMade(snapshotVersion, header(0, 0, 1, 1),
			frameSpec{frameSession, uvarints(9, 100, 500, 0)}, nodeFrame("", "/", 0, 0), endFrame)},
		{"members out of order", handMade(snapshotVersion, header(0, 2, 0, 1),
			frameSpec{frameMember, appendMember(nil, command.Member{ID: 2})}, frameSpec{frameMember, appendMember(nil, command.Member{ID: 1})}, nodeFrame("", "/", 0, 0), endFrame)},
		{"removed members out of order", handMade(snapshotVersion, headerRemoved(0, 0, 2, 0, 1),
			memberFrame(frameRemoved, command.Member{ID: 5}), memberFrame(frameRemoved, command.Member{ID: 3}), nodeFrame("", "/", 0, 0), endFrame)},
		{"duplicate removed member", handMade(snapshotVersion, headerRemoved(0, 0, 2, 0, 1),
			memberFrame(frameRemoved, command.Member{ID: 5}), memberFrame(frameRemoved, command.Member{ID: 5}), nodeFrame("", "/", 0, 0), endFrame)},
		{"removed member is a member", handMade(snapshotVersion, headerRemoved(0, 1, 1, 0, 1),
			memberFrame(frameMember, command.Member{ID: 5}), memberFrame(frameRemoved, command.Member{ID: 5}), nodeFrame("", "/", 0, 0), endFrame)},
		{"removed member with a bad learner flag", handMade(snapshotVersion, headerRemoved(0, 0, 1, 0, 1),
			frameSpec{frameRemoved, append(uvarints(5, 0, 0, 0), 2)}, nodeFrame("", "/", 0, 0), endFrame)},
		{"removed count without removed frames", handMade(snapshotVersion, headerRemoved(0, 0, 1, 0, 1), nodeFrame("", "/", 0, 0), endFrame)},
		{"removed frame beyond the count", handMade(snapshotVersion, header(0, 0, 0, 1), memberFrame(frameRemoved, command.Member{ID: 5}), nodeFrame("", "/", 0, 0), endFrame)},
		{"member frame among the removed", handMade(snapshotVersion, headerRemoved(0, 0, 1, 0, 1), memberFrame(frameMember, command.Member{ID: 5}), nodeFrame("", "/", 0, 0), endFrame)},
		{"version-1 header in version 2", handMade(snapshotVersion, header1(0, 0, 0, 1), nodeFrame("", "/", 0, 0), endFrame)},
		{"version-2 header in version 1", handMade(snapshotVersion1, header(0, 0, 0, 1), nodeFrame("", "/", 0, 0), endFrame)},
		{"removed frame in version 1", handMade(snapshotVersion1, header1(0, 0, 0, 1), memberFrame(frameRemoved, command.Member{ID: 5}), nodeFrame("", "/", 0, 0), endFrame)},
		{"version 0", handMade(0, header(0, 0, 0, 1), nodeFrame("", "/", 0, 0), endFrame)},
		{"version 3", handMade(3, header(0, 0, 0, 1), nodeFrame("", "/", 0, 0), endFrame)},
		{"frame length over the limit", append(append([]byte(snapshotMagic), snapshotVersion, frameHeader), uvarints(maxFramePayload+1)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ReadSnapshot(bytes.NewReader(tt.data))
			if err == nil {
				t.Fatalf("accepted:\n%s", tree(f))
			}
			corruptOffset(t, err)
		})
	}
}

func TestHandMadeSnapshotIsAccepted(t *testing.T) {
	// The hand-made frames above are only meaningful if correct hand-made
	// snapshots are accepted.
	rest := []frameSpec{{frameSession, uvarints(9, 100, 0, 0)},
		nodeFrame("", "/", 0, 1), nodeFrame("/", "/a", 0, 1), nodeFrame("/a", "/a/b", 9, 0), endFrame}
	tests := []struct {
		name        string
		data        []byte
		wantRemoved []command.Member
	}{
		{"version 2", handMade(snapshotVersion, append([]frameSpec{headerRemoved(4, 1, 2, 1, 3), memberFrame(frameMember, command.Member{ID: 3}),
			memberFrame(frameRemoved, command.Member{ID: 2, Name: "n2"}), memberFrame(frameRemoved, command.Member{ID: 5})}, rest...)...),
			[]command.Member{{ID: 2, Name: "n2"}, {ID: 5}}},
		{"version 1", handMade(snapshotVersion1, append([]frameSpec{header1(4, 1, 1, 3), memberFrame(frameMember, command.Member{ID: 3})}, rest...)...), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ReadSnapshot(bytes.NewReader(tt.data))
			if err != nil {
				t.Fatalf("ReadSnapshot: %v", err)
			}
			if s, _ := f.Session(9); s.Ephemerals != 1 || f.Applied() != 4 || len(f.Members()) != 1 {
				t.Errorf("session %+v, applied %d, members %+v", s, f.Applied(), f.Members())
			}
			if !reflect.DeepEqual(f.RemovedMembers(), tt.wantRemoved) {
				t.Errorf("removed %+v, want %+v", f.RemovedMembers(), tt.wantRemoved)
			}
		})
	}
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after < len(p) {
		return 0, errors.New("disk full")
	}
	w.after -= len(p)
	return len(p), nil
}

func TestWriteSnapshotReportsWriteErrors(t *testing.T) {
	h := buildState(t, snapshotStates[2].setup)
	if err := h.f.WriteSnapshot(&failingWriter{after: 10}); err == nil {
		t.Errorf("a failing writer gave no error")
	}
}

// FuzzReadSnapshot checks that ReadSnapshot never panics, that what it
// accepts satisfies the invariants, and that the format is canonical: the
// accepted state serialises back to the input (a version-1 input as
// version 2, which toVersion1 turns back).
func FuzzReadSnapshot(f *testing.F) {
	for _, tt := range snapshotStates {
		f.Add(snapshotBytes(f, buildState(f, tt.setup).f))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm, err := ReadSnapshot(bytes.NewReader(data))
		if err != nil {
			corruptOffset(t, err)
			return
		}
		if err := checkInvariants(fsm); err != nil {
			t.Fatalf("accepted a state breaking invariants: %v", err)
		}
		again := snapshotBytes(t, fsm)
		if data[len(snapshotMagic)] == snapshotVersion1 {
			again = toVersion1(t, again)
		}
		if !bytes.HasPrefix(data, again) {
			t.Fatalf("accepted input does not serialise back to itself")
		}
	})
}

// FuzzReadSnapshotFrames fuzzes what lies behind valid checksums: the input
// is a list of frames (type byte, uvarint length, payload) that the test
// seals with the magic and checksums, so the fuzzer reaches the validation of
// the state instead of stopping at the first checksum.
func FuzzReadSnapshotFrames(f *testing.F) {
	for _, tt := range snapshotStates {
		f.Add(unsealFrames(snapshotBytes(f, buildState(f, tt.setup).f)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sealed := handMade(snapshotVersion, splitFrames(data)...)
		fsm, err := ReadSnapshot(bytes.NewReader(sealed))
		if err != nil {
			corruptOffset(t, err)
			return
		}
		if err := checkInvariants(fsm); err != nil {
			t.Fatalf("accepted a state breaking invariants: %v", err)
		}
		if again := snapshotBytes(t, fsm); !bytes.HasPrefix(sealed, again) {
			t.Fatalf("accepted input does not serialise back to itself")
		}
	})
}

// splitFrames splits unsealed frames (type byte, uvarint length, payload),
// up to the first that is cut short.
func splitFrames(data []byte) []frameSpec {
	var frames []frameSpec
	for len(data) > 0 {
		length, n := binary.Uvarint(data[1:])
		if n <= 0 || length > uint64(len(data)-1-n) {
			break
		}
		frames = append(frames, frameSpec{data[0], data[1+n : 1+n+int(length)]})
		data = data[1+n+int(length):]
	}
	return frames
}

// unsealFrames strips the magic and the checksums from a valid snapshot.
func unsealFrames(data []byte) []byte {
	var out []byte
	data = data[len(snapshotMagic)+1:]
	for len(data) > 0 {
		length, n := binary.Uvarint(data[1:])
		end := 1 + n + int(length)
		out = append(out, data[:end]...)
		data = data[end+4:]
	}
	return out
}
