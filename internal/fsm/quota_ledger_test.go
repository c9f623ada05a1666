package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// setQuotaEverywhere sets a quota in shard 0 and syncs its table to every
// other shard, as the server does.
func (c *cluster) setQuotaEverywhere(prefix string, nodes, bytes uint64) {
	c.shards[0].mustApply(quotaSet(prefix, nodes, bytes))
	c.syncAll()
}

// syncAll sends shard 0's quota table to every other shard.
func (c *cluster) syncAll() {
	epoch, table := c.shards[0].f.QuotaTable()
	for _, h := range c.shards[1:] {
		h.mustApply(authCmd(command.AuthOp{Kind: command.AuthQuotaSync, Epoch: epoch, Quotas: table}))
	}
}

// create makes path with value in its shard, opening its parent's
// directory record if the parent's node lives in another shard.
func (c *cluster) create(path, value string) Result {
	dir := api.Parent(path)
	h := c.dir(dir)
	cmd := put(path, value)
	if d, err := h.f.Directory(dir); err == nil && !d.Opened {
		n, _ := c.node(dir).f.Get(dir)
		cmd.Incarnation, cmd.Observed = n.CreatedIndex, h.f.Applied()
	}
	res, _ := h.apply(cmd)
	return res
}

// room sums, for the quota on prefix of epoch, the allotments of the
// shards at that epoch and the room given and not yet taken; and the usage
// of every shard.
func (c *cluster) room(prefix string) (allotted, inTransit, used uint64) {
	q, _ := c.shards[0].f.QuotaShare(prefix)
	for k, h := range c.shards {
		s, ok := h.f.QuotaShare(prefix)
		if !ok {
			continue
		}
		used += s.Nodes
		if s.Epoch == q.Epoch {
			allotted += s.AllotNodes
		}
		for _, t := range h.f.QuotaTransfers() {
			if t.Prefix == prefix && t.Epoch == q.Epoch && t.Seq > c.shards[t.Recipient].f.QuotaTaken(k) {
				inTransit += t.Nodes
			}
		}
	}
	return allotted, inTransit, used
}

// checkRoom fails unless the allotments plus the room in transit are the
// quota's node limit and the usage is within it.
func (c *cluster) checkRoom(prefix string, limit uint64) {
	c.t.Helper()
	allotted, inTransit, used := c.room(prefix)
	if allotted+inTransit != limit || used > limit {
		c.t.Fatalf("quota on %q: %d allotted + %d in transit, %d used; the limit is %d", prefix, allotted, inTransit, used, limit)
	}
}

func give(prefix string, recipient int, epoch, nodes, bytes uint64) command.Command {
	return authCmd(command.AuthOp{Kind: command.AuthQuotaGive, Prefix: prefix, Shard: uint64(recipient), Epoch: epoch, MaxNodes: nodes, MaxBytes: bytes})
}

func take(t QuotaTransfer, donor int) command.Command {
	return authCmd(command.AuthOp{Kind: command.AuthQuotaTake, Prefix: t.Prefix, Shard: uint64(donor), Seq: t.Seq, Epoch: t.Epoch, MaxNodes: t.Nodes, MaxBytes: t.Bytes})
}

func settle(recipient int, seq uint64) command.Command {
	return authCmd(command.AuthOp{Kind: command.AuthQuotaSettle, Shard: uint64(recipient), Seq: seq})
}

// finish takes donor's outgoing transfers to recipient in order, then
// settles them: what the donor's leader does.
func (c *cluster) finish(donor, recipient int) {
	var last uint64
	for _, t := range c.shards[donor].f.QuotaTransfers() {
		if t.Recipient == recipient {
			c.shards[recipient].mustApply(take(t, donor))
			last = t.Seq
		}
	}
	if last > 0 {
		c.shards[donor].mustApply(settle(recipient, last))
	}
}

// TestQuotaSharesAndSync: a quota set in shard 0 gives each shard its
// initial share once synced (limit/N, the remainder to shard 0); a stale
// or repeated sync changes nothing; a quota set again gets new shares and
// keeps its usage; a cleared quota leaves every shard by the next sync; a
// quota change proposed outside shard 0 is refused.
func TestQuotaSharesAndSync(t *testing.T) {
	c := newCluster(t)
	c.setQuotaEverywhere("/q", 10, 103)
	for k, h := range c.shards {
		s, _ := h.f.QuotaShare("/q")
		wantNodes, wantBytes := uint64(2), uint64(25)
		if k == 0 {
			wantNodes, wantBytes = 4, 28
		}
		if s.AllotNodes != wantNodes || s.AllotBytes != wantBytes || s.Epoch != c.shards[0].f.QuotaSynced() {
			t.Errorf("shard %d: %+v, want %d nodes and %d bytes", k, s, wantNodes, wantBytes)
		}
	}
	c.checkRoom("/q", 10)
	staleEpoch, staleTable := c.shards[0].f.QuotaTable()
	c.setQuotaEverywhere("/r", 3, 0)
	before := stateOf(c.shards[2].f) + fmt.Sprint(c.shards[2].f.Quotas())
	c.shards[2].mustApply(authCmd(command.AuthOp{Kind: command.AuthQuotaSync, Epoch: staleEpoch, Quotas: staleTable}))
	if after := stateOf(c.shards[2].f) + fmt.Sprint(c.shards[2].f.Quotas()); after != before {
		t.Fatalf("a stale sync changed shard 2:\n%s\n%s", before, after)
	}
	if _, ok := c.shards[2].f.QuotaShare("/r"); !ok {
		t.Fatal("a stale sync dropped a newer quota")
	}
	c.shards[0].mustApply(authCmd(command.AuthOp{Kind: command.AuthQuotaClear, Prefix: "/r"}))
	c.syncAll()
	for k, h := range c.shards {
		if _, ok := h.f.QuotaShare("/r"); ok {
			t.Errorf("shard %d keeps a cleared quota", k)
		}
	}
	if res, _ := c.shards[1].apply(quotaSet("/x", 1, 0)); codeOf(res.Err) != api.CodeInternal {
		t.Errorf("a quota set in shard 1: %v, want internal", res.Err)
	}
	if res, _ := newHarness(t).apply(give("/q", 1, 1, 1, 0)); codeOf(res.Err) != api.CodeInvalidArgument {
		t.Errorf("a give with one shard: %v, want invalid_argument", res.Err)
	}
}

// TestQuotaAllotmentRefusal: a write past its shard's allotment is refused
// with quota_exceeded and RedoQuotaRoom, names the shortfall, changes
// nothing and is not remembered, so the same request applies once room
// arrives; room given and taken is usable exactly once.
func TestQuotaAllotmentRefusal(t *testing.T) {
	c := newCluster(t)
	c.shards[0].mustApply(put("/q", "")) // before the quota: /q counts from the start
	c.setQuotaEverywhere("/q", 8, 0)
	dir := "/q/a"
	c.create(dir, "")
	k := c.m.ChildShard(dir)
	r := c.shards[k]
	var made int
	for made = 0; ; made++ {
		if res := c.create(fmt.Sprintf("%s/n%d", dir, made), ""); res.Err != nil {
			break
		}
	}
	s, _ := r.f.QuotaShare("/q")
	if s.Nodes != s.AllotNodes {
		t.Fatalf("shard %d stopped at %d of its allotment of %d", k, s.Nodes, s.AllotNodes)
	}
	// Its allotment is all used: it has nothing to give.
	r.refused(give("/q", (k+1)%testShards, s.Epoch, 1, 0), api.CodeQuotaExceeded, RedoNone)
	sid := c.shards[0].mustApply(createSession(5000)).SessionID
	w := withSeq(put(dir+"/x", ""), sid, 1)
	w.Observed = r.f.Applied()
	if k == 0 {
		w.Observed = 0
	}
	res := r.refused(w, api.CodeQuotaExceeded, RedoQuotaRoom)
	want := []QuotaShortfall{{Prefix: "/q", Epoch: s.Epoch, Nodes: s.Nodes + 1}}
	if !slices.Equal(res.QuotaShort, want) {
		t.Fatalf("shortfall %+v, want %+v", res.QuotaShort, want)
	}
	donor := (k + 1) % testShards
	d, _ := c.shards[donor].f.QuotaShare("/q")
	c.shards[donor].mustApply(give("/q", k, d.Epoch, 1, 0))
	c.checkRoom("/q", 8)
	c.finish(donor, k)
	c.checkRoom("/q", 8)
	if res, _ := r.apply(w); res.Err != nil {
		t.Fatalf("the same request after room arrived: %v", res.Err)
	}
	if res, _ := r.apply(w); res.Err != nil || res.Node.Path != dir+"/x" {
		t.Fatalf("its retry is not answered from the window: %+v", res)
	}
	r.refused(put(dir+"/y", ""), api.CodeQuotaExceeded, RedoQuotaRoom)
	c.checkRoom("/q", 8)
}

// TestQuotaGiveTakeExactlyOnce: a give takes only free room of the quota's
// epoch; a take applies once, in sequence order per donor (a duplicate is
// ignored, a gap refused); a settle drops only taken transfers; room of an
// epoch the recipient no longer has is void; the allotments plus the room
// in transit always equal the limit.
func TestQuotaGiveTakeExactlyOnce(t *testing.T) {
	c := newCluster(t)
	c.setQuotaEverywhere("/q", 20, 0)
	epoch := c.shards[0].f.QuotaSynced()
	d, r := c.shards[1], c.shards[2]
	d.refused(give("/q", 2, epoch, 6, 0), api.CodeQuotaExceeded, RedoNone) // 5 free
	d.refused(give("/q", 2, epoch+1, 1, 0), api.CodePreconditionFailed, RedoNone)
	d.refused(give("/q", 2, epoch, 0, 1), api.CodeInvalidArgument, RedoNone) // no byte limit
	d.refused(give("/q", 1, epoch, 1, 0), api.CodeInternal, RedoNone)        // to itself
	d.mustApply(give("/q", 2, epoch, 2, 0))
	d.mustApply(give("/q", 2, epoch, 3, 0))
	c.checkRoom("/q", 20)
	out := d.f.QuotaTransfers()
	if len(out) != 2 || out[0].Seq != 1 || out[1].Seq != 2 {
		t.Fatalf("outgoing %+v", out)
	}
	r.refused(take(out[1], 1), api.CodePreconditionFailed, RedoNone) // a gap
	r.mustApply(take(out[0], 1))
	before := fmt.Sprint(r.f.Quotas())
	r.mustApply(take(out[0], 1)) // a duplicate
	if after := fmt.Sprint(r.f.Quotas()); after != before {
		t.Fatalf("a duplicate take changed the allotment: %s to %s", before, after)
	}
	c.checkRoom("/q", 20)
	d.mustApply(settle(2, 1))
	if out := d.f.QuotaTransfers(); len(out) != 1 || out[0].Seq != 2 {
		t.Fatalf("after settling 1: %+v", out)
	}
	d.refused(settle(2, 3), api.CodeInvalidArgument, RedoNone)
	c.checkRoom("/q", 20)
	// The quota is set again (a new epoch) before transfer 2 is taken: its
	// room is void, and the new shares sum to the new limit.
	c.setQuotaEverywhere("/q", 12, 0)
	c.finish(1, 2)
	c.checkRoom("/q", 12)
	if s, _ := r.f.QuotaShare("/q"); s.AllotNodes != 3 {
		t.Fatalf("shard 2 after a void take: %+v, want its share of 3", s)
	}
	if got := r.f.QuotaTaken(1); got != 2 {
		t.Fatalf("a void take still counts: last taken %d, want 2", got)
	}
}

// TestQuotaLedgerSnapshot: the ledger (epochs, allotments, sequence
// numbers, transfers in flight) survives a snapshot of every shard, in the
// ledger versions only when there is a ledger; a damaged one is refused;
// Reseed gives every shard its initial share again.
func TestQuotaLedgerSnapshot(t *testing.T) {
	c := buildShardedState(t)
	plain := snapshotBytes(t, c.shards[1].f)
	c.setQuotaEverywhere("/q", 9, 90)
	c.shards[0].mustApply(put("/q", "123"))
	epoch := c.shards[0].f.QuotaSynced()
	c.shards[3].mustApply(give("/q", 1, epoch, 1, 10))
	c.shards[3].mustApply(give("/q", 0, epoch, 1, 0))
	c.finish(3, 1)
	c.shards[3].mustApply(give("/q", 1, epoch, 0, 5)) // in flight
	for k, h := range c.shards {
		data := snapshotBytes(t, h.f)
		if v := data[len(snapshotMagic)]; v <= snapshotVersionMax {
			t.Fatalf("shard %d with a ledger written in version %d", k, v)
		}
		back, err := ReadShardSnapshotBytes(t, data, k)
		if err != nil {
			t.Fatalf("shard %d: %v", k, err)
		}
		if back.Hash() != h.f.Hash() || fmt.Sprint(back.Quotas(), back.QuotaTransfers()) != fmt.Sprint(h.f.Quotas(), h.f.QuotaTransfers()) {
			t.Fatalf("shard %d restores to another ledger:\n%v\n%v", k, back.Quotas(), h.f.Quotas())
		}
		if err := checkQuotaCounts(back); err != nil {
			t.Fatalf("shard %d: %v", k, err)
		}
		if k == 3 {
			for i := range data {
				flipped := bytes.Clone(data)
				flipped[i] ^= 0x01
				if _, err := ReadShardSnapshotBytes(t, flipped, k); !errors.Is(err, ErrCorruptSnapshot) && !errors.Is(err, ErrWrongShard) {
					t.Fatalf("flipping byte %d of shard 3: %v", i, err)
				}
			}
		}
	}
	if v := plain[len(snapshotMagic)]; v > snapshotVersionMax {
		t.Errorf("a shard without a ledger written in version %d", v)
	}
	for k, h := range c.shards {
		if err := h.f.Reseed(h.index+100, nil); err != nil {
			t.Fatal(err)
		}
		h.index += 100
		if len(h.f.QuotaTransfers()) != 0 {
			t.Errorf("shard %d keeps transfers after a reseed", k)
		}
	}
	c.checkRoom("/q", 9)
}

// TestQuotaLedgerRandom plays writers under one quota spread over many
// directories (so over every shard) and the server's room moves, with
// transfers left unfinished at random (a crashed server) and finished
// later by the donor, duplicate takes, and deletes; after every step the
// allotments plus the room in transit equal the limit and usage stays
// within it. At the end, one directory alone fills the quota exactly.
func TestQuotaLedgerRandom(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f491))
	c := newCluster(t)
	const limit = 60
	c.shards[c.m.Shard("/q")].mustApply(put("/q", ""))
	var dirs []string
	for i := range 8 {
		dirs = append(dirs, fmt.Sprintf("/q/d%d", i))
		if res := c.create(dirs[i], ""); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	c.setQuotaEverywhere("/q", limit, 0)
	var leaves []string
	refused, moves, crashes := 0, 0, 0
	for step := 0; step < *stepsFlag; step++ {
		switch n := rng.IntN(10); {
		case n < 6:
			path := fmt.Sprintf("%s/n%d", dirs[rng.IntN(len(dirs))], step)
			res := c.create(path, "")
			if res.Redo == RedoQuotaRoom {
				if c.moveRoom(rng, c.m.ChildShard(api.Parent(path)), res.QuotaShort, &crashes) {
					moves++
				}
				res = c.create(path, "")
			}
			if res.Err == nil {
				leaves = append(leaves, path)
			} else if codeOf(res.Err) == api.CodeQuotaExceeded {
				refused++
			} else {
				t.Fatalf("create %s: %v", path, res.Err)
			}
		case n < 8 && len(leaves) > 0:
			i := rng.IntN(len(leaves))
			c.deleteNode(leaves[i])
			leaves = slices.Delete(leaves, i, i+1)
		default: // a donor's leader finishes what a crash left
			donor := rng.IntN(testShards)
			c.finish(donor, rng.IntN(testShards))
		}
		c.checkRoom("/q", limit)
		for k, h := range c.shards {
			if err := checkQuotaCounts(h.f); err != nil {
				t.Fatalf("seed %d, step %d, shard %d: %v", seed, step, k, err)
			}
		}
	}
	for donor := range testShards {
		for recipient := range testShards {
			c.finish(donor, recipient)
		}
	}
	dir := dirs[rng.IntN(len(dirs))]
	for i := 0; ; i++ {
		path := fmt.Sprintf("%s/fill%d", dir, i)
		res := c.create(path, "")
		if res.Redo == RedoQuotaRoom && c.moveRoom(rng, c.dir(dir).f.shard.index, res.QuotaShort, nil) {
			res = c.create(path, "")
		}
		if res.Err != nil {
			break
		}
	}
	if _, _, used := c.room("/q"); used != limit {
		t.Fatalf("seed %d: one directory filled the quota to %d of %d", seed, used, limit)
	}
	t.Logf("seed %d: %d refusals, %d room moves, %d left unfinished", seed, refused, moves, crashes)
}

// moveRoom is the server's answer to a shortfall of recipient: room from
// the shards with the most free allotment, each give followed by the takes
// and the settle, unless crashes is set and the dice say the server
// stopped after its give. It reports whether room moved.
func (c *cluster) moveRoom(rng *rand.Rand, recipient int, shorts []QuotaShortfall, crashes *int) bool {
	moved := false
	for _, short := range shorts {
		s, _ := c.shards[recipient].f.QuotaShare(short.Prefix)
		need := int64(short.Nodes) - int64(s.AllotNodes)
		donors := make([]int, 0, testShards)
		for k := range testShards {
			if k != recipient {
				donors = append(donors, k)
			}
		}
		rng.Shuffle(len(donors), func(i, j int) { donors[i], donors[j] = donors[j], donors[i] })
		for _, donor := range donors {
			if need <= 0 {
				break
			}
			d, _ := c.shards[donor].f.QuotaShare(short.Prefix)
			available := int64(free(d.AllotNodes, d.Nodes))
			if available == 0 {
				continue
			}
			amount := min(available, max(need, available/2))
			c.shards[donor].mustApply(give(short.Prefix, recipient, short.Epoch, uint64(amount), 0))
			moved = true
			if crashes != nil && rng.IntN(4) == 0 {
				*crashes++
				continue // the room stays in transit until a finish
			}
			c.finish(donor, recipient)
			need -= amount
		}
	}
	return moved
}
