package testcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// bank is the state of TestTxnTransfersKeepTheSum: accounts whose balances
// move only by transactions that also log each transfer.
type bank struct {
	accounts  int
	initial   int
	committed atomic.Int64 // transfers acknowledged
	unknown   atomic.Int64 // transfers of unknown outcome
}

func (b *bank) account(i int) string { return fmt.Sprintf("/bank/acct%d", i) }

const bankLog = "/bank/log"

// TestTxnTransfersKeepTheSum: clients move money between accounts with
// transactions (two compare-and-set writes and a sequential log entry)
// through random members while the leader is crashed and restarted. At the
// end, on every member: the total is unchanged, no balance is negative, and
// the balances are exactly the initial ones replayed through the log, so
// every transaction applied all its writes or none.
func TestTxnTransfersKeepTheSum(t *testing.T) {
	seed := testSeed(t)
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := &bank{accounts: 5, initial: 100}
	base := c.URL(c.WaitLeader(10 * time.Second))
	for i := range b.accounts {
		if _, err := Put(ctx, base, b.account(i), strconv.Itoa(b.initial), "none"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Put(ctx, base, bankLog, "", "none"); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.client(ctx, c.URLs(), rand.New(rand.NewPCG(uint64(seed), uint64(i))), stop)
		}()
	}
	progress := func(n int64) {
		t.Helper()
		target := b.committed.Load() + n
		if !waitFor(60*time.Second, func() bool { return b.committed.Load() >= target }) {
			close(stop)
			wg.Wait()
			t.Fatalf("transfers stalled at %d (want %d)", b.committed.Load(), target)
		}
	}
	progress(30)
	leader := c.WaitLeader(10 * time.Second)
	c.Crash(leader)
	progress(30)
	c.Restart(leader)
	progress(20)
	close(stop)
	wg.Wait()
	c.EnsureSame(30 * time.Second)
	for _, i := range c.Running() {
		b.check(t, c, i)
	}
	t.Logf("seed %d: %d transfers acknowledged, %d of unknown outcome; sum kept on every member, balances equal to the log's replay",
		seed, b.committed.Load(), b.unknown.Load())
}

// client makes transfers until stop is closed.
func (b *bank) client(ctx context.Context, urls []string, random *rand.Rand, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		url := urls[random.IntN(len(urls))]
		from, to := random.IntN(b.accounts), random.IntN(b.accounts-1)
		if to >= from {
			to++
		}
		err := b.transfer(ctx, url, from, to, 1+random.IntN(20))
		var apiErr *api.Error
		switch {
		case err == nil:
			b.committed.Add(1)
		case errors.As(err, &apiErr) && (apiErr.Code == api.CodePreconditionFailed || apiErr.Code == api.CodeInvalidArgument):
			// a concurrent transfer won, or nothing to move: nothing applied
		default:
			b.unknown.Add(1) // crashed member, leader change: outcome unknown
			select {
			case <-stop:
			case <-time.After(time.Duration(10+random.IntN(30)) * time.Millisecond): // pacing, not correctness
			}
		}
	}
}

// transfer moves up to amount from one account to another in one
// transaction conditioned on the versions it read.
func (b *bank) transfer(ctx context.Context, url string, from, to, amount int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	src, err := Get(ctx, url, b.account(from), "")
	if err != nil {
		return err
	}
	dst, err := Get(ctx, url, b.account(to), "")
	if err != nil {
		return err
	}
	srcBalance, _ := strconv.Atoi(src.Value)
	dstBalance, _ := strconv.Atoi(dst.Value)
	amount = min(amount, srcBalance)
	if amount == 0 {
		return api.Errorf(api.CodeInvalidArgument, "nothing to move")
	}
	str := func(n int) *string { s := strconv.Itoa(n); return &s }
	entry := fmt.Sprintf("%d %d %d", from, to, amount)
	req := api.TxnRequest{Ops: []api.TxnOp{
		{Op: api.TxnSet, Path: src.Path, Value: str(srcBalance - amount), Version: &src.Version},
		{Op: api.TxnSet, Path: dst.Path, Value: str(dstBalance + amount), Version: &dst.Version},
		{Op: api.TxnCreate, Path: bankLog + "/t-", Value: &entry, Sequential: true},
	}}
	var reply api.Txn
	if err := Do(ctx, "POST", url, "/v1/txn", nil, req, &reply); err != nil {
		return err
	}
	if len(reply.Results) != 3 || reply.Results[0].ModifiedIndex != reply.Results[2].CreatedIndex {
		return fmt.Errorf("transfer reply %+v: want three results at one index", reply)
	}
	return nil
}

// check verifies member i's state from its local reads.
func (b *bank) check(t *testing.T, c *Cluster, i int) {
	t.Helper()
	balances := make([]int, b.accounts)
	for a := range b.accounts {
		balances[a] = b.initial
	}
	replayed := append([]int(nil), balances...)
	children, err := c.Nodes[i].Server.Children(context.Background(), bankLog, staleRead)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range children.Children {
		n, err := c.LocalGet(i, bankLog+"/"+name)
		if err != nil {
			t.Fatal(err)
		}
		var from, to, amount int
		if _, err := fmt.Sscanf(n.Value, "%d %d %d", &from, &to, &amount); err != nil {
			t.Fatalf("log entry %s = %q: %v", name, n.Value, err)
		}
		replayed[from] -= amount
		replayed[to] += amount
	}
	sum := 0
	for a := range b.accounts {
		n, err := c.LocalGet(i, b.account(a))
		if err != nil {
			t.Fatal(err)
		}
		balances[a], _ = strconv.Atoi(n.Value)
		sum += balances[a]
		if balances[a] < 0 {
			t.Errorf("member %d: %s is %d", i, b.account(a), balances[a])
		}
	}
	logged := int64(len(children.Children))
	switch {
	case sum != b.accounts*b.initial:
		t.Errorf("member %d: balances %v sum to %d, want %d", i, balances, sum, b.accounts*b.initial)
	case fmt.Sprint(balances) != fmt.Sprint(replayed):
		t.Errorf("member %d: balances %v, but the log replays to %v", i, balances, replayed)
	case logged < b.committed.Load() || logged > b.committed.Load()+b.unknown.Load():
		t.Errorf("member %d: %d transfers logged, %d acknowledged and %d unknown", i, logged, b.committed.Load(), b.unknown.Load())
	}
}

// TestTxnWatches: a transaction fires watches as one entry does, every
// event at its index, in operation order, under the watch rule of one
// event per (index, path) (docs/api.md): the first change of each node, so
// /t/a created then set fires CREATED only, and /t's three children changes
// one CHILDREN_CHANGED. A refused transaction fires nothing.
func TestTxnWatches(t *testing.T) {
	c := New(t, 3, Steady(Options{}))
	ctx := ctxT(t, 60*time.Second)
	leader := c.WaitLeader(5 * time.Second)
	url := c.URL(leader)
	if _, err := Put(ctx, url, "/t/c", "", "none"); err != nil {
		t.Fatal(err)
	}
	follower := c.Others(leader)[0]
	s := createSession(t, ctx, c.URL(follower), 20*time.Second)
	stream := openStream(t, c.URL(follower), s.SessionID)
	specs := []api.WatchRequest{
		{Path: "/t/a"},
		{Path: "/t", Recursive: true, Persistent: true},
	}
	var ids []string
	for _, spec := range specs {
		spec.SessionID = s.SessionID
		reg, err := AddWatch(ctx, c.URL(follower), spec)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, reg.WatchID)
	}
	str := func(s string) *string { return &s }
	refused := api.TxnRequest{Ops: []api.TxnOp{
		{Op: api.TxnCreate, Path: "/t/a", Value: str("1")},
		{Op: api.TxnCheck, Path: "/t/missing"},
	}}
	if err := Do(ctx, "POST", url, "/v1/txn", nil, refused, nil); api.CodeOf(err) != api.CodeNotFound {
		t.Fatalf("refused txn: %v", err)
	}
	applied := api.TxnRequest{Ops: []api.TxnOp{
		{Op: api.TxnCreate, Path: "/t/a", Value: str("1")},
		{Op: api.TxnSet, Path: "/t/a", Value: str("2")},
		{Op: api.TxnCreate, Path: "/t/b"},
		{Op: api.TxnDelete, Path: "/t/c"},
	}}
	var reply api.Txn
	if err := Do(ctx, "POST", url, "/v1/txn", nil, applied, &reply); err != nil {
		t.Fatal(err)
	}
	at := reply.Index
	want := [][]firing{
		{{api.EventCreated, "/t/a", 1, at}},
		{{api.EventCreated, "/t/a", 1, at}, {api.EventChildrenChanged, "/t", 1, at},
			{api.EventCreated, "/t/b", 1, at}, {api.EventDeleted, "/t/c", 1, at}},
	}
	got := collectUntil(t, stream, registerSentinel(t, ctx, c, follower, s.SessionID, url), 20*time.Second)
	for i := range specs {
		if !sameFirings(got[ids[i]], want[i]) {
			t.Errorf("watch %+v: got %v, want %v", specs[i], got[ids[i]], want[i])
		}
	}
	var order []string
	for _, f := range got[ids[1]] {
		order = append(order, f.event+" "+f.path)
	}
	if wantOrder := "CREATED /t/a,CHILDREN_CHANGED /t,CREATED /t/b,DELETED /t/c"; strings.Join(order, ",") != wantOrder {
		t.Errorf("recursive watch saw %v, want the operations' order %s", order, wantOrder)
	}
}

// TestReadManySeesTransactionsWhole: multi-reads of every account on every
// member, linearizable and stale, while transfers run, always see the
// total: each sees one index, and a transaction is all of it or none. A
// missing node fails its own read only.
func TestReadManySeesTransactionsWhole(t *testing.T) {
	seed := testSeed(t)
	c := New(t, 3, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := &bank{accounts: 4, initial: 50}
	base := c.URL(c.WaitLeader(10 * time.Second))
	reads := []server.ReadOp{{Path: "/bank", Children: true}, {Path: "/bank/missing"}}
	for i := range b.accounts {
		if _, err := Put(ctx, base, b.account(i), strconv.Itoa(b.initial), "none"); err != nil {
			t.Fatal(err)
		}
		reads = append(reads, server.ReadOp{Path: b.account(i)})
	}
	created, err := Put(ctx, base, bankLog, "", "none")
	if err != nil {
		t.Fatal(err)
	}
	// Stale reads on a follower must find the accounts: every member has
	// applied their creation before the reads start.
	c.WaitApplied(created.ModifiedIndex, 30*time.Second)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.client(ctx, c.URLs(), rand.New(rand.NewPCG(uint64(seed), uint64(i))), stop)
		}()
	}
	random := rand.New(rand.NewPCG(uint64(seed), 99))
	checked := 0
	for b.committed.Load() < 60 && ctx.Err() == nil {
		node := random.IntN(3)
		opts := server.ReadOptions{Consistency: api.Linearizable}
		if random.IntN(2) == 0 {
			opts = staleRead
		}
		res, err := c.Nodes[node].Server.ReadMany(ctx, reads, opts)
		if err != nil {
			t.Fatalf("ReadMany on %s: %v", c.Nodes[node].Name, err)
		}
		if res.Results[0].Err != nil || len(res.Results[0].Children) != b.accounts+1 || res.Results[1].Err == nil || res.Results[1].Err.Code != api.CodeNotFound {
			t.Fatalf("ReadMany results %+v", res.Results[:2])
		}
		sum := 0
		for _, r := range res.Results[2:] {
			balance, _ := strconv.Atoi(r.Node.Value)
			sum += balance
			if r.Node.ModifiedIndex > res.Index {
				t.Fatalf("%s modified at %d, after the read's index %d", r.Node.Path, r.Node.ModifiedIndex, res.Index)
			}
		}
		if sum != b.accounts*b.initial {
			t.Fatalf("seed %d: multi-read on %s at index %d sums to %d, want %d: %+v", seed, c.Nodes[node].Name, res.Index, sum, b.accounts*b.initial, res.Results)
		}
		checked++
	}
	close(stop)
	wg.Wait()
	t.Logf("seed %d: %d multi-reads during %d transfers all saw the total", seed, checked, b.committed.Load())
}
