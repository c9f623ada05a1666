package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/fsm"
)

// TestOneGroup: a transaction whose paths fall in two groups is refused
// with invalid_argument naming both, whatever op brings in the second;
// paths of one group pass with that group.
func TestOneGroup(t *testing.T) {
	shardOf := map[string]uint64{"/a/x": 2, "/a/y": 2, "/b/z": 5, "/c/w": 7}
	groupOf := func(p string) uint64 { return shardOf[p] }
	tests := []struct {
		name    string
		paths   []string
		group   uint64
		message string
	}{
		{"one path", []string{"/b/z"}, 5, ""},
		{"siblings", []string{"/a/x", "/a/y", "/a/x"}, 2, ""},
		{"second shard last", []string{"/a/x", "/a/y", "/b/z"}, 0, "transaction spans shards 2 and 5"},
		{"second shard first", []string{"/c/w", "/a/x"}, 0, "transaction spans shards 7 and 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			group, err := oneGroup(tt.paths, groupOf)
			if tt.message == "" {
				if err != nil || group != tt.group {
					t.Fatalf("oneGroup = %d, %v; want %d", group, err, tt.group)
				}
				return
			}
			if api.CodeOf(err) != api.CodeInvalidArgument || !strings.HasPrefix(err.(*api.Error).Message, tt.message) {
				t.Fatalf("oneGroup = %d, %v; want invalid_argument %q", group, err, tt.message)
			}
		})
	}
}

// TestTxnCommandRefusals: what the server refuses before proposing, with
// the failing operation's index where one operation is at fault.
func TestTxnCommandRefusals(t *testing.T) {
	s := &Server{cfg: Config{MaxValueSize: 8}}
	ok := TxnOp{Kind: TxnCreate, Path: "/ok"}
	many := make([]TxnOp, api.MaxTxnOps+1)
	for i := range many {
		many[i] = ok
	}
	half := []byte(strings.Repeat("v", api.MaxTxnBytes/2))
	tests := []struct {
		name   string
		req    TxnRequest
		code   api.Code
		failed int // -1: not one operation's fault
	}{
		{"no operation", TxnRequest{}, api.CodeInvalidArgument, -1},
		{"too many operations", TxnRequest{Ops: many}, api.CodeTooLarge, -1},
		{"too many bytes", TxnRequest{Ops: []TxnOp{{Kind: TxnSet, Path: "/a", Value: half}, {Kind: TxnSet, Path: "/b", Value: half}}}, api.CodeTooLarge, -1},
		{"request_seq without session", TxnRequest{Ops: []TxnOp{ok}, RequestSeq: 1}, api.CodeInvalidArgument, -1},
		{"bad path", TxnRequest{Ops: []TxnOp{ok, {Kind: TxnSet, Path: "/a//b"}}}, api.CodeInvalidArgument, 1},
		{"value over the limit", TxnRequest{Ops: []TxnOp{ok, ok, {Kind: TxnSet, Path: "/a", Value: []byte("123456789")}}}, api.CodeTooLarge, 2},
		{"ephemeral without session", TxnRequest{Ops: []TxnOp{{Kind: TxnCreate, Path: "/e", Ephemeral: true}}}, api.CodeInvalidArgument, 0},
		{"create in a lock queue", TxnRequest{Ops: []TxnOp{ok, {Kind: TxnCreate, Path: "/locks/x/lock-"}}}, api.CodeInvalidArgument, 1},
		{"set of an election node", TxnRequest{Ops: []TxnOp{{Kind: TxnSet, Path: "/elections/r"}}}, api.CodeInvalidArgument, 0},
		{"unknown kind", TxnRequest{Ops: []TxnOp{{Kind: TxnCheck + 1, Path: "/a"}}}, api.CodeInvalidArgument, 0},
		{"unknown precondition", TxnRequest{Ops: []TxnOp{{Kind: TxnCheck, Path: "/a", Precondition: AtVersion + 1}}}, api.CodeInvalidArgument, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.txnCommand(tt.req)
			var opErr *api.TxnOpError
			isOp := errors.As(err, &opErr)
			switch {
			case api.CodeOf(err) != tt.code:
				t.Fatalf("txnCommand: %v, want code %s", err, tt.code)
			case tt.failed < 0 && isOp:
				t.Fatalf("txnCommand: %v blames operation %d", err, opErr.Op)
			case tt.failed >= 0 && (!isOp || opErr.Op != tt.failed):
				t.Fatalf("txnCommand: %v, want operation %d blamed", err, tt.failed)
			}
		})
	}
	// Deletes and checks in the reserved trees are allowed, as DELETE is.
	if _, err := s.txnCommand(TxnRequest{Ops: []TxnOp{{Kind: TxnDelete, Path: "/locks/x/lock-0000000001"}, {Kind: TxnCheck, Path: "/locks/x"}}}); err != nil {
		t.Errorf("delete and check under /locks: %v", err)
	}
}

// TestTxnResult: the state machine's refusal of one operation becomes a
// TxnOpError naming it; a refusal of the whole transaction stays a plain
// error.
func TestTxnResult(t *testing.T) {
	refusal := api.Errorf(api.CodeNotFound, "node \"/x\" not found")
	_, err := txnResult(fsm.Result{Err: refusal, Txn: &fsm.TxnResult{Failed: 3}}, 9)
	var opErr *api.TxnOpError
	if !errors.As(err, &opErr) || opErr.Op != 3 || api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("op refusal: %v", err)
	}
	_, err = txnResult(fsm.Result{Err: api.SessionGone(5)}, 9)
	if errors.As(err, &opErr) || api.CodeOf(err) != api.CodeSessionExpired {
		t.Errorf("whole refusal: %v", err)
	}
	out, err := txnResult(fsm.Result{Txn: &fsm.TxnResult{Ops: []fsm.TxnOpResult{{Node: fsm.NodeMeta{Path: "/a", Version: 2}, Owner: 7}}}}, 9)
	if err != nil || out.Index != 9 || len(out.Ops) != 1 || out.Ops[0].Path != "/a" || out.Ops[0].Owner != 7 {
		t.Errorf("applied: %+v, %v", out, err)
	}
}
