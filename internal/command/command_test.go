package command

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// sampleCommands covers every op and every field.
var sampleCommands = []struct {
	name    string
	command Command
}{
	{"noop", Command{Op: OpNoop}},
	{"noop with id", Command{Op: OpNoop, ID: 1 << 60}},
	{"put", Command{Op: OpPut, ID: 7, Path: "/config/a", Value: []byte("hello")}},
	{"put cas", Command{Op: OpPut, Path: "/x", Value: []byte{0, 1, 2}, Precondition: PrecondVersion, Version: 300}},
	{"put create only", Command{Op: OpPut, Path: "/x", Precondition: PrecondNone}},
	{"put ephemeral sequential exactly once", Command{Op: OpPut, ID: 1, Path: "/locks/R/lock-", Ephemeral: true, Sequential: true, SessionID: 0x3f2a9c01d4e5b6a7, RequestSeq: 12}},
	{"delete recursive", Command{Op: OpDelete, Path: "/a", Recursive: true, SessionID: 5, RequestSeq: 1}},
	{"session create", Command{Op: OpSessionCreate, ID: 99, TimeoutMs: 10000}},
	{"session close", Command{Op: OpSessionClose, SessionID: 42}},
	{"session expire", Command{Op: OpSessionExpire, Sessions: []uint64{3, 1 << 40, 17}, LeaderTerm: 9}},
	{"member set", Command{Op: OpMemberSet, Member: Member{ID: 0xdeadbeef, Name: "n1", PeerURL: "http://127.0.0.1:7101", ClientURL: "http://127.0.0.1:7001", Learner: true}}},
	{"member remove", Command{Op: OpMemberRemove, Member: Member{ID: 3}}},
	{"enqueue", Command{Op: OpEnqueue, ID: 5, Path: "/locks/R/lock-", Value: []byte("me"), Ephemeral: true, Sequential: true, SessionID: 9}},
	{"everything", Command{Op: OpPut, ID: ^uint64(0), Path: "/p", Value: bytes.Repeat([]byte("v"), 300), Precondition: PrecondVersion, Version: 1,
		Ephemeral: true, Sequential: true, Recursive: true, SessionID: 2, RequestSeq: 3, TimeoutMs: 4, Sessions: []uint64{5},
		Member: Member{ID: 6, Name: "a", PeerURL: "b", ClientURL: "c", Learner: true}}},
}

func TestRoundTrip(t *testing.T) {
	for _, tt := range sampleCommands {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.command.Marshal()
			if len(data) != tt.command.Size() {
				t.Errorf("Marshal gave %d bytes, Size says %d", len(data), tt.command.Size())
			}
			if data[0] != FormatVersion {
				t.Errorf("first byte %d, want the format version %d", data[0], FormatVersion)
			}
			got, err := Unmarshal(data)
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !reflect.DeepEqual(got, tt.command) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, tt.command)
			}
			prefix := []byte("prefix")
			appended := tt.command.AppendMarshal(prefix)
			if !bytes.Equal(appended[:len(prefix)], prefix) || !bytes.Equal(appended[len(prefix):], data) {
				t.Errorf("AppendMarshal differs from Marshal")
			}
		})
	}
}

func TestUnmarshalRejects(t *testing.T) {
	valid := (&Command{Op: OpPut, Path: "/a", Value: []byte("v")}).Marshal()
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"unknown version", []byte{FormatVersion + 1, 1, 0, 0, 0}, ErrUnknownVersion},
		{"version zero", []byte{0}, ErrUnknownVersion},
		{"short header", []byte{FormatVersion, 1}, ErrMalformed},
		{"unknown op", []byte{FormatVersion, byte(opCount), 0, 0, 0}, ErrMalformed},
		{"unknown flag", []byte{FormatVersion, 1, 0x80, 0, 0}, ErrMalformed},
		{"unknown precondition", []byte{FormatVersion, 1, 0, 9, 0}, ErrMalformed},
		{"no presence mask", []byte{FormatVersion, 1, 0, 0}, ErrMalformed},
		{"unknown presence bit", []byte{FormatVersion, 1, 0, 0, 0x80, 0x40}, ErrMalformed},
		{"present but zero id", []byte{FormatVersion, 0, 0, 0, hasID, 0}, ErrMalformed},
		{"present but empty path", []byte{FormatVersion, 1, 0, 0, hasPath, 0}, ErrMalformed},
		{"non-minimal varint", []byte{FormatVersion, 0, 0, 0, hasID, 0x81, 0x00}, ErrMalformed},
		{"varint overflow", append([]byte{FormatVersion, 0, 0, 0, hasID}, bytes.Repeat([]byte{0xff}, 11)...), ErrMalformed},
		{"path longer than input", []byte{FormatVersion, 1, 0, 0, hasPath, 10, '/'}, ErrMalformed},
		{"huge session count", []byte{FormatVersion, 5, 0, 0, hasSessions, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrMalformed},
		{"truncated", valid[:len(valid)-1], ErrMalformed},
		{"trailing byte", append(append([]byte(nil), valid...), 0), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Unmarshal(tt.data)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Unmarshal(%x) = %v, want %v", tt.data, err, tt.want)
			}
		})
	}
}

// TestVersion1Decodes checks that a command written by a version-1 binary
// (the log and snapshots of existing clusters) still decodes, is marked
// Legacy so the state machine applies version 1's rules, and re-encodes to
// the same bytes.
func TestVersion1Decodes(t *testing.T) {
	for _, tt := range sampleCommands {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.command.Marshal()
			data[0] = FormatV1
			got, err := Unmarshal(data)
			if err != nil {
				t.Fatalf("Unmarshal of version 1: %v", err)
			}
			if !got.Legacy() || got.Format != FormatV1 {
				t.Errorf("decoded Format %d, Legacy %v; want version 1", got.Format, got.Legacy())
			}
			want := tt.command
			want.Format = FormatV1
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
			}
			if again := got.Marshal(); !bytes.Equal(again, data) {
				t.Errorf("re-encodes to %x, want %x", again, data)
			}
		})
	}
}

func TestUnmarshalValueAliasesInput(t *testing.T) {
	data := (&Command{Op: OpPut, Path: "/a", Value: []byte("abc")}).Marshal()
	c, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if cap(c.Value) != len(c.Value) {
		t.Errorf("Value has spare capacity %d: an append by the caller would overwrite the input", cap(c.Value)-len(c.Value))
	}
}

func TestOpString(t *testing.T) {
	if got := OpSessionExpire.String(); got != "session_expire" {
		t.Errorf("OpSessionExpire.String() = %q", got)
	}
	if got := Op(200).String(); got != "op(200)" {
		t.Errorf("Op(200).String() = %q", got)
	}
}

// FuzzUnmarshal checks that Unmarshal never panics and that whatever it
// accepts re-encodes to the same bytes (the encoding is canonical).
func FuzzUnmarshal(f *testing.F) {
	for _, tt := range sampleCommands {
		f.Add(tt.command.Marshal())
	}
	for _, tt := range shardCommands {
		f.Add(tt.command.Marshal())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Unmarshal(data)
		if err != nil {
			return
		}
		if again := c.Marshal(); !bytes.Equal(again, data) {
			t.Fatalf("accepted %x but re-encodes to %x", data, again)
		}
	})
}

var sinkBytes []byte

func BenchmarkMarshalPut256(b *testing.B) {
	c := Command{Op: OpPut, ID: 123456, Path: "/bench/key-000123", Value: bytes.Repeat([]byte("v"), 256), SessionID: 1 << 33, RequestSeq: 77}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = c.AppendMarshal(buf[:0])
	}
	sinkBytes = buf
}

func BenchmarkUnmarshalPut256(b *testing.B) {
	data := (&Command{Op: OpPut, ID: 123456, Path: "/bench/key-000123", Value: bytes.Repeat([]byte("v"), 256), SessionID: 1 << 33, RequestSeq: 77}).Marshal()
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		c, err := Unmarshal(data)
		if err != nil {
			b.Fatal(err)
		}
		sinkBytes = c.Value
	}
}

// TestTimeStamp checks the proposal time appended to version 3: it round
// trips, and versions 1 and 2, which never had it, refuse it.
func TestTimeStamp(t *testing.T) {
	stamped := Command{Op: OpPut, ID: 8, Path: "/t", Value: []byte("v"), TimeMs: 1_796_000_000_123}
	data := stamped.Marshal()
	got, err := Unmarshal(data)
	if err != nil || !reflect.DeepEqual(got, stamped) {
		t.Fatalf("round trip: got %+v, %v; want %+v", got, err, stamped)
	}
	for _, version := range []byte{FormatV1, FormatV2} {
		old := append([]byte(nil), data...)
		old[0] = version
		if _, err := Unmarshal(old); !errors.Is(err, ErrMalformed) {
			t.Errorf("version %d with a time: %v, want ErrMalformed", version, err)
		}
	}
}

// TestStreamTag checks the ordering tag appended to version 3: it round
// trips, with a transaction after it; a tag with a zero part is
// malformed; versions 1 and 2 refuse it.
func TestStreamTag(t *testing.T) {
	tagged := Command{Op: OpTxn, ID: 9, SessionID: 77, TimeMs: 1_796_000_000_123,
		StreamID: 1<<63 + 5, StreamFloor: 42, StreamSeq: 300,
		Ops: []TxnOp{{Kind: TxnSet, Path: "/t", Value: []byte("v")}}}
	data := tagged.Marshal()
	if len(data) != tagged.Size() {
		t.Fatalf("Size %d, encoding %d bytes", tagged.Size(), len(data))
	}
	got, err := Unmarshal(data)
	if err != nil || !reflect.DeepEqual(got, tagged) {
		t.Fatalf("round trip: got %+v, %v; want %+v", got, err, tagged)
	}
	for _, partial := range []Command{
		{Op: OpPut, Path: "/t", StreamID: 1, StreamFloor: 1},
		{Op: OpPut, Path: "/t", StreamFloor: 1, StreamSeq: 1},
		{Op: OpPut, Path: "/t", StreamID: 1, StreamSeq: 1},
	} {
		if _, err := Unmarshal(partial.Marshal()); !errors.Is(err, ErrMalformed) {
			t.Errorf("tag %d/%d/%d: %v, want ErrMalformed", partial.StreamID, partial.StreamFloor, partial.StreamSeq, err)
		}
	}
	for _, version := range []byte{FormatV1, FormatV2} {
		old := append([]byte(nil), data...)
		old[0] = version
		if _, err := Unmarshal(old); !errors.Is(err, ErrMalformed) {
			t.Errorf("version %d with a stream tag: %v, want ErrMalformed", version, err)
		}
	}
}
