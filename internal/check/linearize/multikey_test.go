package linearize

import (
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func mop(client int, in MultiInput, out MultiOutput, call, ret int64) porcupine.Operation {
	if ret < 0 {
		out.Unknown, ret = true, math.MaxInt64
	}
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

func mget(key string) MultiInput        { return MultiInput{Kind: MultiGet, Key: key} }
func mput(key, value string) MultiInput { return MultiInput{Kind: MultiPut, Key: key, Value: value} }
func mtxn(sets ...TxnSet) MultiInput    { return MultiInput{Kind: MultiTxn, Sets: sets} }
func mread(value string, version uint64) MultiOutput {
	return MultiOutput{Found: true, Value: value, Version: version}
}

// TestMultiModelHistories: the model accepts atomic transactions and
// catches the anomalies a non-atomic or non-isolated one shows.
func TestMultiModelHistories(t *testing.T) {
	setup := []porcupine.Operation{
		mop(0, mput("a", "a1"), MultiOutput{Version: 1}, 0, 1),
		mop(0, mput("b", "b1"), MultiOutput{Version: 1}, 2, 3),
	}
	tests := []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"txn then reads", []porcupine.Operation{
			mop(1, mtxn(TxnSet{"a", "a2", 1}, TxnSet{"b", "b2", 0}), MultiOutput{Versions: []uint64{2, 2}}, 10, 20),
			mop(2, mget("a"), mread("a2", 2), 21, 22),
			mop(2, mget("b"), mread("b2", 2), 23, 24),
		}, porcupine.Ok},
		{"half a txn seen after it returned", []porcupine.Operation{
			mop(1, mtxn(TxnSet{"a", "a2", 1}, TxnSet{"b", "b2", 0}), MultiOutput{Versions: []uint64{2, 2}}, 10, 20),
			mop(2, mget("a"), mread("a2", 2), 21, 22),
			mop(2, mget("b"), mread("b1", 1), 23, 24),
		}, porcupine.Illegal},
		{"half a txn seen while it runs, the other half's old value after", []porcupine.Operation{
			mop(1, mtxn(TxnSet{"a", "a2", 0}, TxnSet{"b", "b2", 0}), MultiOutput{Unknown: true}, 10, -1),
			mop(2, mget("a"), mread("a2", 2), 11, 12),
			mop(2, mget("b"), mread("b1", 1), 13, 14),
		}, porcupine.Illegal},
		{"refused txn with a stale version", []porcupine.Operation{
			mop(1, mput("a", "a2"), MultiOutput{Version: 2}, 10, 11),
			mop(1, mtxn(TxnSet{"a", "a3", 1}, TxnSet{"b", "b3", 1}), MultiOutput{Refused: true}, 12, 13),
			mop(2, mget("b"), mread("b1", 1), 14, 15),
		}, porcupine.Ok},
		{"refused txn whose preconditions held", []porcupine.Operation{
			mop(1, mtxn(TxnSet{"a", "a3", 1}, TxnSet{"b", "b3", 1}), MultiOutput{Refused: true}, 12, 13),
		}, porcupine.Illegal},
		{"txn on a missing key applied", []porcupine.Operation{
			mop(1, mtxn(TxnSet{"a", "a3", 0}, TxnSet{"c", "c1", 0}), MultiOutput{Versions: []uint64{2, 1}}, 12, 13),
		}, porcupine.Illegal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			history := append(append([]porcupine.Operation(nil), setup...), tt.ops...)
			if got := porcupine.CheckOperationsTimeout(MultiModel(), history, 10*time.Second); got != tt.want {
				t.Fatalf("verdict %s, want %s", got, tt.want)
			}
		})
	}
}
