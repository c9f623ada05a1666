package replica

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/command"
)

// BenchmarkApplyTxnSetBatch applies batches of committed entries as a
// follower's Ready loop does: each a ZooKeeper client's setData (a
// one-operation transaction) of one of 10,000 existing keys, 256-byte
// values, ten to a batch. One op is one entry: decoding, the state
// machine's apply and the batch's bookkeeping.
func BenchmarkApplyTxnSetBatch(b *testing.B) {
	const keys, batch = 10_000, 10
	r, err := New(Config{Self: 1, Group: 1, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	value := bytes.Repeat([]byte("v"), 256)
	path := func(k int) string { return fmt.Sprintf("/bench/set/k%08d", k) }
	index := uint64(0)
	next := func(cmd *command.Command) raftpb.Entry {
		index++
		return raftpb.Entry{Index: index, Term: 1, Data: cmd.Marshal()}
	}
	for k := range keys {
		if err := r.Apply([]raftpb.Entry{next(&command.Command{Op: command.OpPut, Path: path(k), Value: value})}); err != nil {
			b.Fatal(err)
		}
	}
	// The entries' data, made before the clock starts, as raft hands them.
	rng := rand.New(rand.NewPCG(1, 2))
	batches := make([][]raftpb.Entry, 64)
	for i := range batches {
		for range batch {
			set := command.Command{Op: command.OpTxn, TimeMs: 1, Ops: []command.TxnOp{{Kind: command.TxnSet, Path: path(rng.IntN(keys)), Value: value}}}
			batches[i] = append(batches[i], raftpb.Entry{Term: 1, Data: set.Marshal()})
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		entries := batches[(i/batch)%len(batches)]
		for j := range entries {
			index++
			entries[j].Index = index
		}
		if err := r.Apply(entries); err != nil {
			b.Fatal(err)
		}
	}
}
