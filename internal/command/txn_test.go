package command

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// sampleTxns covers every kind of transaction operation and every field.
var sampleTxns = []struct {
	name    string
	command Command
}{
	{"empty", Command{Op: OpTxn}},
	{"create", Command{Op: OpTxn, ID: 3, Ops: []TxnOp{{Kind: TxnCreate, Path: "/a", Value: []byte("v")}}}},
	{"every kind", Command{Op: OpTxn, ID: 1 << 50, SessionID: 0x3f2a9c01d4e5b6a7, RequestSeq: 9, Ops: []TxnOp{
		{Kind: TxnCreate, Path: "/q/job-", Value: []byte("x"), Ephemeral: true, Sequential: true},
		{Kind: TxnSet, Path: "/a", Value: bytes.Repeat([]byte("w"), 200), Precondition: PrecondVersion, Version: 300},
		{Kind: TxnSet, Path: "/b"},
		{Kind: TxnDelete, Path: "/c", Recursive: true},
		{Kind: TxnCheck, Path: "/d", Precondition: PrecondNone},
		{Kind: TxnCheck, Path: "/e", Precondition: PrecondVersion, Version: 1},
	}}},
}

func TestTxnRoundTrip(t *testing.T) {
	for _, tt := range sampleTxns {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.command.Marshal()
			if len(data) != tt.command.Size() {
				t.Errorf("Marshal gave %d bytes, Size says %d", len(data), tt.command.Size())
			}
			got, err := Unmarshal(data)
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !reflect.DeepEqual(got, tt.command) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, tt.command)
			}
			if again := got.Marshal(); !bytes.Equal(again, data) {
				t.Errorf("re-encodes to %x, want %x", again, data)
			}
		})
	}
}

// TestUnmarshalReusing: operations decode into the array given when it
// holds them all, into a new one when it does not, and nothing of what the
// array held before shows in the result.
func TestUnmarshalReusing(t *testing.T) {
	every := sampleTxns[2].command
	stale := TxnOp{Kind: TxnDelete, Path: "/stale", Value: []byte("old"), Version: 7, Recursive: true}
	for _, tt := range []struct {
		name  string
		want  Command
		room  int // the capacity of the array given
		reuse bool
	}{
		{"fewer than the room", sampleTxns[1].command, 4, true},
		{"as many as the room", every, len(every.Ops), true},
		{"more than the room", every, 2, false},
		{"no room", every, 0, false},
		{"no operations", Command{Op: OpPut, Path: "/p", Value: []byte("v")}, 4, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			room := make([]TxnOp, tt.room)
			for i := range room {
				room[i] = stale
			}
			got, err := UnmarshalReusing(tt.want.Marshal(), room[:0])
			if err != nil {
				t.Fatalf("UnmarshalReusing: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("decoded:\n got %+v\nwant %+v", got, tt.want)
			}
			reused := len(got.Ops) > 0 && tt.room > 0 && &got.Ops[0] == &room[0]
			if reused != tt.reuse {
				t.Errorf("decoded into the array given: %v, want %v", reused, tt.reuse)
			}
		})
	}
}

// TestTxnSectionOnlyOnTxn: the ops section exists only for OpTxn, so the
// encoding of every other op is what it was before transactions.
func TestTxnSectionOnlyOnTxn(t *testing.T) {
	put := Command{Op: OpPut, Path: "/a", Value: []byte("v")}
	before := put.Marshal()
	put.Ops = []TxnOp{{Kind: TxnCheck, Path: "/x"}}
	if after := put.Marshal(); !bytes.Equal(before, after) {
		t.Fatalf("a put with Ops encodes to %x, want %x", after, before)
	}
}

func TestTxnUnmarshalRejects(t *testing.T) {
	header := []byte{FormatVersion, byte(OpTxn), 0, 0, 0}
	op := func(b ...byte) []byte { return append(append([]byte(nil), header...), b...) }
	valid := sampleTxns[2].command.Marshal()
	tests := []struct {
		name string
		data []byte
	}{
		{"no count", op()},
		{"count beyond input", op(3, byte(TxnCheck), 0, 0, 0)},
		{"huge count", op(0xff, 0xff, 0xff, 0xff, 0x0f)},
		{"unknown kind", op(1, byte(txnKindCount), 0, 0, 0)},
		{"unknown flag", op(1, byte(TxnCreate), flagLearner, 0, 0)},
		{"unknown precondition", op(1, byte(TxnCheck), 0, byte(precondCount), 0)},
		{"unknown presence bit", op(1, byte(TxnCheck), 0, 0, 0x08)},
		{"present but empty path", op(1, byte(TxnCheck), 0, 0, txnHasPath, 0)},
		{"present but zero version", op(1, byte(TxnCheck), 0, 0, txnHasVersion, 0)},
		{"truncated op header", op(1, byte(TxnCheck), 0)},
		{"truncated", valid[:len(valid)-1]},
		{"trailing byte", append(append([]byte(nil), valid...), 0)},
		{"txn in format version 1", append([]byte{FormatV1}, valid[1:]...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c, err := Unmarshal(tt.data); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Unmarshal(%x) = %+v, %v; want ErrMalformed", tt.data, c, err)
			}
		})
	}
}

func TestTxnKindString(t *testing.T) {
	if got := TxnCheck.String(); got != "check" {
		t.Errorf("TxnCheck.String() = %q", got)
	}
	if got := OpTxn.String(); got != "txn" {
		t.Errorf("OpTxn.String() = %q", got)
	}
}

// FuzzUnmarshalTxn is FuzzUnmarshal seeded with transactions.
func FuzzUnmarshalTxn(f *testing.F) {
	for _, tt := range sampleTxns {
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
