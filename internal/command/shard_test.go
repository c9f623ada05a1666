package command

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// shardCommands covers the ops and fields of format version 3.
var shardCommands = []struct {
	name    string
	command Command
}{
	{"sessions ended", Command{Op: OpSessionsEnded, Sessions: []uint64{1 << 63, 7}}},
	{"sessions cleaned", Command{Op: OpSessionsCleaned, ID: 3, Sessions: []uint64{7}}},
	{"dir mark", Command{Op: OpDirMark, Path: "/svc", Precondition: PrecondVersion, Version: 4, SessionID: 9, RequestSeq: 2}},
	{"dir unmark", Command{Op: OpDirUnmark, Path: "/svc", Mark: 1200}},
	{"dir close", Command{Op: OpDirClose, Path: "/svc", Incarnation: 77}},
	{"dir delete", Command{Op: OpDirDelete, Path: "/svc", Mark: 1200}},
	{"create with open", Command{Op: OpPut, Path: "/svc/a-", Sequential: true, Ephemeral: true, SessionID: 5, RequestSeq: 1, Incarnation: 77, Observed: 1 << 40}},
	{"enqueue with observed", Command{Op: OpEnqueue, Path: "/locks/R/lock-", SessionID: 5, Observed: 3}},
	{"everything v3", Command{Op: OpPut, ID: 1, Path: "/p", Value: []byte("v"), SessionID: 2, RequestSeq: 3, Sessions: []uint64{5}, LeaderTerm: 6,
		Incarnation: 7, Observed: 8, Mark: 9}},
}

func TestShardCommandsRoundTrip(t *testing.T) {
	for _, tt := range shardCommands {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.command.Marshal()
			if data[0] != FormatVersion || FormatVersion != 3 {
				t.Fatalf("first byte %d, want format version 3", data[0])
			}
			if len(data) != tt.command.Size() {
				t.Errorf("Size %d, encoding %d bytes", tt.command.Size(), len(data))
			}
			got, err := Unmarshal(data)
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !reflect.DeepEqual(got, tt.command) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, tt.command)
			}
		})
	}
}

// TestShardCommandsMalformedInOldFormats checks that a version-1 or
// version-2 encoding cannot carry what version 3 added: an old entry never
// decodes to a sharding op.
func TestShardCommandsMalformedInOldFormats(t *testing.T) {
	for _, tt := range shardCommands {
		for _, version := range []byte{FormatV1, FormatV2} {
			data := tt.command.Marshal()
			data[0] = version
			if _, err := Unmarshal(data); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s in format version %d: err %v, want ErrMalformed", tt.name, version, err)
			}
		}
	}
}

// TestVersion2Decodes checks that every command of format version 2 (the
// logs of clusters before sharding) decodes, applies with the current rules
// (not Legacy) and re-encodes to the same bytes.
func TestVersion2Decodes(t *testing.T) {
	for _, tt := range sampleCommands {
		data := tt.command.Marshal()
		data[0] = FormatV2
		got, err := Unmarshal(data)
		if err != nil {
			t.Fatalf("%s: Unmarshal of version 2: %v", tt.name, err)
		}
		want := tt.command
		want.Format = FormatV2
		if got.Legacy() || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded %+v (Legacy %v), want %+v", tt.name, got, got.Legacy(), want)
		}
		if again := got.Marshal(); !bytes.Equal(again, data) {
			t.Errorf("%s: re-encodes to %x, want %x", tt.name, again, data)
		}
	}
}

func TestShardOpStrings(t *testing.T) {
	want := map[Op]string{OpSessionsEnded: "sessions_ended", OpSessionsCleaned: "sessions_cleaned", OpDirMark: "dir_mark",
		OpDirUnmark: "dir_unmark", OpDirClose: "dir_close", OpDirDelete: "dir_delete"}
	for op, name := range want {
		if op.String() != name {
			t.Errorf("%d.String() = %q, want %q", op, op.String(), name)
		}
	}
	if len(opNames) != int(opCount) {
		t.Errorf("%d op names for %d ops", len(opNames), opCount)
	}
}
