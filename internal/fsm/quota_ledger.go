package fsm

import (
	"github.com/tidwall/btree"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// The quota ledger of a sharded cluster (docs/design.md, "Quotas across
// shards"): an escrow of each quota's room among the shards.
//
// Shard 0 holds the quota table (set and cleared there by admins); every
// other shard receives it by AuthQuotaSync, which carries the whole table
// as of shard 0's index of its latest change (the table epoch) and applies
// only if that epoch is above the last one applied, so a stale or repeated
// sync changes nothing. Each quota carries its own epoch: the index of
// shard 0 that set it. A shard that sees a quota with a new epoch (set,
// or set again with other limits) takes its initial share of it:
// limit/N, the remainder to shard 0 (shareAllotment); so the shares of
// one epoch sum to the limit.
//
// A shard checks a write against its own allotment (quota.go). Room moves
// by two entries: AuthQuotaGive in the donor D takes room from D's free
// allotment (allotment minus usage) and records the transfer as outgoing,
// with the next sequence number from D to the recipient R; AuthQuotaTake
// in R adds the room if the sequence number is the next from D (an earlier
// one is a duplicate and changes nothing), and only if R's quota still has
// the transfer's epoch (otherwise R has a new share of a new epoch, and the
// room of the old epoch is void). AuthQuotaSettle in D then drops the
// records R has taken. Takes of one pair (D, R) apply in sequence order, so
// R needs only the last sequence number taken from D to apply each exactly
// once.
//
// Invariant, per quota and epoch e: the allotments of the shards at epoch e
// plus the room of the transfers of epoch e given and not yet taken equal
// the limit. A give is taken from free room only, and a take is proposed
// only after its give applied, so at every moment the room the shards can
// use (their allotments) is at most the limit, and each shard's usage is
// at most its allotment when it grew: the sum of the usage under a quota
// never passes it. A give whose outcome is unknown to its proposer may
// have applied; the donor's leader finishes every outgoing record
// (takes in order, then the settle), so room is never lost in transit.
// While a quota change has reached some shards and not others, each shard
// enforces the version it has: the shards at the old epoch with the old
// shares, the others with the new ones (the server answers a quota_set once
// every shard has it, and shard 0's leader re-sends the table to a shard
// that lacks it).

// quotaState is a state machine's quota counts and, with several shards,
// its ledger. Its trees are copied on write by Clone.
type quotaState struct {
	// counts holds one quotaCount per quota of auth.quotas, by prefix.
	counts *btree.BTreeG[quotaCount]
	// peers holds, by shard, the sequence numbers of the transfers to and
	// from each other shard (sharded only).
	peers *btree.BTreeG[quotaPeer]
	// out holds the outgoing transfers not yet settled, by (recipient,
	// seq) (sharded only).
	out *btree.BTreeG[quotaTransfer]
	// synced is the epoch of the quota table: in shard 0 the index of its
	// latest quota change, elsewhere the epoch of the latest sync applied
	// (sharded only).
	synced uint64
}

// quotaPeer is the ledger's sequence numbers with one other shard: given,
// the last transfer given to it (the next takes given+1); taken, the last
// transfer from it applied here. Never both 0 in the tree.
type quotaPeer struct {
	shard        int
	given, taken uint64
}

func quotaPeerLess(a, b quotaPeer) bool { return a.shard < b.shard }

// quotaTransfer is an outgoing transfer: room of one quota's epoch given to
// recipient under seq, not yet known to be taken.
type quotaTransfer struct {
	recipient    int
	seq          uint64
	prefix       string
	epoch        uint64
	nodes, bytes uint64
}

func quotaTransferLess(a, b quotaTransfer) bool {
	if a.recipient != b.recipient {
		return a.recipient < b.recipient
	}
	return a.seq < b.seq
}

// QuotaTransfer is an outgoing transfer of the ledger, as listed.
type QuotaTransfer struct {
	Recipient    int
	Seq          uint64
	Prefix       string
	Epoch        uint64
	Nodes, Bytes uint64
}

func newQuotaState() quotaState {
	return quotaState{
		counts: newQuotaCounts(),
		peers:  btree.NewBTreeGOptions(quotaPeerLess, treeOptions),
		out:    btree.NewBTreeGOptions(quotaTransferLess, treeOptions),
	}
}

func (q *quotaState) clone() quotaState {
	return quotaState{counts: q.counts.Copy(), peers: q.peers.Copy(), out: q.out.Copy(), synced: q.synced}
}

// ledgerEmpty reports whether the ledger holds nothing to write in a
// snapshot: no quota, no sequence number, no transfer, no table epoch.
func (f *FSM) ledgerEmpty() bool {
	return len(f.auth.quotas) == 0 && f.quota.peers.Len() == 0 && f.quota.out.Len() == 0 && f.quota.synced == 0
}

// share is shard index's initial share of limit among count shards.
func share(limit uint64, index, count int) uint64 {
	s := limit / uint64(count)
	if index == 0 {
		s += limit % uint64(count)
	}
	return s
}

// shareAllotment gives c this shard's initial share of its limits.
func (f *FSM) shareAllotment(c *quotaCount) {
	c.allotNodes = share(c.maxNodes, f.shard.index, f.shard.count())
	c.allotBytes = share(c.maxBytes, f.shard.index, f.shard.count())
}

// applyLedger applies AuthQuotaSync, AuthQuotaGive, AuthQuotaTake and
// AuthQuotaSettle, which exist only in a sharded cluster.
func (f *FSM) applyLedger(op *command.AuthOp) *api.Error {
	if !f.shard.sharded() {
		return api.Errorf(api.CodeInvalidArgument, "%v: a cluster with one shard keeps no quota ledger", op.Kind)
	}
	if op.Kind != command.AuthQuotaSync {
		if op.Shard >= uint64(f.shard.count()) || int(op.Shard) == f.shard.index {
			return api.Errorf(api.CodeInternal, "%s: %v names shard %d: want another shard of %d", f.shard, op.Kind, op.Shard, f.shard.count())
		}
	}
	switch op.Kind {
	case command.AuthQuotaSync:
		return f.syncQuotas(op)
	case command.AuthQuotaGive:
		return f.giveRoom(op)
	case command.AuthQuotaTake:
		return f.takeRoom(op)
	default:
		return f.settleRoom(op)
	}
}

// syncQuotas applies AuthQuotaSync in a shard other than 0: the table of
// shard 0 as of op.Epoch replaces this shard's, if op.Epoch is newer than
// the last applied (else nothing changes). A quota whose epoch this shard
// has keeps its count and allotment; a quota of a new epoch gets this
// shard's initial share (its count is kept, or made by a scan if new).
func (f *FSM) syncQuotas(op *command.AuthOp) *api.Error {
	if f.shard.meta() {
		return api.Errorf(api.CodeInternal, "%s: shard 0 holds the quota table; it takes no sync", f.shard)
	}
	if err := checkQuotaTable(op); err != nil {
		return err
	}
	if op.Epoch <= f.quota.synced {
		return nil // stale or repeated
	}
	quotas := make([]Quota, 0, len(op.Quotas))
	counts := newQuotaCounts()
	for _, d := range op.Quotas {
		quotas = append(quotas, Quota{Prefix: d.Prefix, MaxNodes: d.MaxNodes, MaxBytes: d.MaxBytes})
		c, ok := f.quota.counts.Get(quotaCount{prefix: d.Prefix})
		if !ok {
			c = quotaCount{prefix: d.Prefix}
			c.nodes, c.bytes = f.scanUsage(d.Prefix)
		}
		if c.epoch != d.Epoch {
			c.maxNodes, c.maxBytes, c.epoch = d.MaxNodes, d.MaxBytes, d.Epoch
			f.shareAllotment(&c)
		}
		counts.Set(c)
	}
	f.auth.quotas = quotas
	f.quota.counts = counts
	f.quota.synced = op.Epoch
	return nil
}

// checkQuotaTable checks a sync's table: an epoch, the quotas sorted by
// prefix, each valid, with a limit and an epoch not above the table's.
func checkQuotaTable(op *command.AuthOp) *api.Error {
	if op.Epoch == 0 || len(op.Quotas) > MaxQuotas {
		return api.Errorf(api.CodeInvalidArgument, "a quota sync needs an epoch and at most %d quotas", MaxQuotas)
	}
	for i, d := range op.Quotas {
		if err := CheckPrefix(d.Prefix); err != nil {
			return err
		}
		switch {
		case d.MaxNodes == 0 && d.MaxBytes == 0:
			return api.Errorf(api.CodeInvalidArgument, "quota on %q has no limit", d.Prefix)
		case d.Epoch == 0 || d.Epoch > op.Epoch:
			return api.Errorf(api.CodeInvalidArgument, "quota on %q has epoch %d: want 1 to the table's %d", d.Prefix, d.Epoch, op.Epoch)
		case i > 0 && op.Quotas[i-1].Prefix >= d.Prefix:
			return api.Errorf(api.CodeInvalidArgument, "quota sync out of order at %q", d.Prefix)
		}
	}
	return nil
}

// giveRoom applies AuthQuotaGive in the donor: the room leaves this
// shard's allotment, if the quota has the epoch and that much is free,
// and is recorded as outgoing to op.Shard with the next sequence number.
func (f *FSM) giveRoom(op *command.AuthOp) *api.Error {
	c, ok := f.quota.counts.Get(quotaCount{prefix: op.Prefix})
	switch {
	case !ok || c.epoch != op.Epoch:
		return api.Errorf(api.CodePreconditionFailed, "%s has no quota on %q of epoch %d", f.shard, op.Prefix, op.Epoch)
	case op.MaxNodes == 0 && op.MaxBytes == 0:
		return api.Errorf(api.CodeInvalidArgument, "a quota give moves some room")
	case (op.MaxNodes > 0 && c.maxNodes == 0) || (op.MaxBytes > 0 && c.maxBytes == 0):
		return api.Errorf(api.CodeInvalidArgument, "the quota on %q has no such limit to give", op.Prefix)
	case op.MaxNodes > free(c.allotNodes, c.nodes) || op.MaxBytes > free(c.allotBytes, c.bytes):
		return api.Errorf(api.CodeQuotaExceeded, "%s has %d nodes and %d bytes of %q free, not %d and %d",
			f.shard, free(c.allotNodes, c.nodes), free(c.allotBytes, c.bytes), op.Prefix, op.MaxNodes, op.MaxBytes)
	}
	c.allotNodes -= op.MaxNodes
	c.allotBytes -= op.MaxBytes
	f.quota.counts.Set(c)
	p := f.quotaPeer(int(op.Shard))
	p.given++
	f.quota.peers.Set(p)
	f.quota.out.Set(quotaTransfer{recipient: p.shard, seq: p.given, prefix: op.Prefix, epoch: op.Epoch, nodes: op.MaxNodes, bytes: op.MaxBytes})
	return nil
}

// free is the room of an allotment beyond usage.
func free(allot, usage uint64) uint64 {
	if allot < usage {
		return 0
	}
	return allot - usage
}

// takeRoom applies AuthQuotaTake in the recipient: transfer op.Seq from
// op.Shard, if it is the next from there; an earlier one was applied and
// changes nothing. Its room joins the allotment if the quota here still
// has the transfer's epoch; otherwise it is void (a new epoch's shares
// sum to the limit without it).
func (f *FSM) takeRoom(op *command.AuthOp) *api.Error {
	p := f.quotaPeer(int(op.Shard))
	switch {
	case op.Seq <= p.taken:
		return nil // a duplicate
	case op.Seq != p.taken+1:
		return api.Errorf(api.CodePreconditionFailed, "%s: transfer %d from shard %d is not the next: %d is", f.shard, op.Seq, op.Shard, p.taken+1)
	}
	p.taken = op.Seq
	f.quota.peers.Set(p)
	if c, ok := f.quota.counts.Get(quotaCount{prefix: op.Prefix}); ok && c.epoch == op.Epoch {
		if c.maxNodes > 0 {
			c.allotNodes += op.MaxNodes
		}
		if c.maxBytes > 0 {
			c.allotBytes += op.MaxBytes
		}
		f.quota.counts.Set(c)
	}
	return nil
}

// settleRoom applies AuthQuotaSettle in the donor: the outgoing transfers
// to op.Shard up to op.Seq, which it has taken, are dropped.
func (f *FSM) settleRoom(op *command.AuthOp) *api.Error {
	p := f.quotaPeer(int(op.Shard))
	if op.Seq == 0 || op.Seq > p.given {
		return api.Errorf(api.CodeInvalidArgument, "%s: settling transfer %d to shard %d, of %d given", f.shard, op.Seq, op.Shard, p.given)
	}
	var settled []quotaTransfer
	f.quota.out.Ascend(quotaTransfer{recipient: p.shard}, func(t quotaTransfer) bool {
		if t.recipient != p.shard || t.seq > op.Seq {
			return false
		}
		settled = append(settled, t)
		return true
	})
	for _, t := range settled {
		f.quota.out.Delete(t)
	}
	return nil
}

// quotaPeer returns the ledger's record of shard (zero if none).
func (f *FSM) quotaPeer(shard int) quotaPeer {
	p, ok := f.quota.peers.Get(quotaPeer{shard: shard})
	if !ok {
		p = quotaPeer{shard: shard}
	}
	return p
}

// resetLedger gives every quota this shard's initial share again and
// forgets every transfer and sequence number: Reseed's fresh start, the
// same in every shard of the new cluster (room in transit in the backup is
// void; the shares sum to the limits).
func (f *FSM) resetLedger() {
	if !f.shard.sharded() {
		return
	}
	var counts []quotaCount
	f.quota.counts.Scan(func(c quotaCount) bool {
		counts = append(counts, c)
		return true
	})
	for _, c := range counts {
		f.shareAllotment(&c)
		f.quota.counts.Set(c)
	}
	f.quota.peers = btree.NewBTreeGOptions(quotaPeerLess, treeOptions)
	f.quota.out = btree.NewBTreeGOptions(quotaTransferLess, treeOptions)
}

// QuotaTransfers lists the outgoing transfers not yet settled, by
// recipient then sequence number: the donor's leader takes them in the
// recipients, in order, then settles them.
func (f *FSM) QuotaTransfers() []QuotaTransfer {
	list := make([]QuotaTransfer, 0, f.quota.out.Len())
	f.quota.out.Scan(func(t quotaTransfer) bool {
		list = append(list, QuotaTransfer{Recipient: t.recipient, Seq: t.seq, Prefix: t.prefix, Epoch: t.epoch, Nodes: t.nodes, Bytes: t.bytes})
		return true
	})
	return list
}

// QuotaTaken returns the sequence number of the last transfer from shard
// donor applied here (0 if none).
func (f *FSM) QuotaTaken(donor int) uint64 { return f.quotaPeer(donor).taken }

// QuotaTable returns the quota table with each quota's epoch and the
// table's epoch (QuotaSynced): what shard 0 sends the other shards.
func (f *FSM) QuotaTable() (epoch uint64, table []command.QuotaDef) {
	for _, q := range f.auth.quotas {
		c, _ := f.quota.counts.Get(quotaCount{prefix: q.Prefix})
		table = append(table, command.QuotaDef{Prefix: q.Prefix, MaxNodes: q.MaxNodes, MaxBytes: q.MaxBytes, Epoch: c.epoch})
	}
	return f.quota.synced, table
}

// QuotaSynced returns the epoch of this shard's quota table: in shard 0
// the index of its latest quota change, elsewhere the epoch of the latest
// sync applied (0: none).
func (f *FSM) QuotaSynced() uint64 { return f.quota.synced }
