package fsm

import (
	"fmt"

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
// shard 0 that started it.
//
// Starting an epoch. A quota that is new, re-created, gains a kind of
// limit or has a limit lowered starts an epoch (quota.go, setQuota). Its
// AuthQuotaSet carries U, the other shards' usage under the prefix as the
// server read it (through a barrier of each) before proposing; shard 0's
// allotment is L - U, possibly negative (a debt). Each other shard k, when
// it applies the sync that brings the epoch, takes exactly its usage u_k
// then as allotment (ownAllotment). Setting the same limits again changes
// nothing; a raised limit keeps the epoch and adds the increase to shard
// 0's allotment. A lowered limit starts an epoch because the cut must come
// out of free room, and the free room of other shards is theirs to use.
//
// Moving room. AuthQuotaGive in the donor D takes room from D's free
// allotment (allotment minus usage) and records the transfer as outgoing,
// with the next sequence number from D to the recipient R; AuthQuotaTake
// in R adds the room if the sequence number is the next from D (an earlier
// one is a duplicate and changes nothing), and only if R's quota still has
// the transfer's epoch (otherwise the room of the old epoch is void).
// AuthQuotaSettle in D then drops the records R has taken. Takes of one
// pair (D, R) apply in sequence order, so R needs only the last sequence
// number taken from D to apply each exactly once.
//
// Why the limit holds, per quota and epoch e once every shard applied it:
// the allotments plus the room of e's transfers given and not taken equal
// L - U + sum(u_k) = L + W, where W is the net growth of the shards between
// the server's read and their sync: growth made before the quota was in
// force there (the documented window). Let M = sum over shards of
// max(usage, allotment) plus transit. A write grows a shard only within its
// allotment, a delete lowers usage, a give takes only free room and a take
// adds exactly what its give removed: M never grows (a raise adds to L and
// M alike). While every shard is within its allotment M = L + W, so the
// summed usage grows past the limit only by the window's growth. A debt
// (shard 0's usage above its allotment: the quota set below the usage) is
// the exception: M is then the usage when set, nothing grows past it, but
// another shard may reuse room its deletes free while the debt lasts; the
// server's ledger loop pays it by moving free room to shard 0. A give whose
// outcome is unknown to its proposer may have applied; the donor's leader
// finishes every outgoing record (takes in order, then the settle), so
// room is never lost in transit.

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

// ownAllotment gives c, at the start of an epoch in a shard other than 0,
// its usage here as allotment: the shard cannot grow under the quota until
// room is moved to it, and reuses what its deletes free.
func ownAllotment(c *quotaCount) {
	c.allotNodes, c.allotBytes = 0, 0
	if c.maxNodes > 0 {
		c.allotNodes = clampInt64(c.nodes)
	}
	if c.maxBytes > 0 {
		c.allotBytes = clampInt64(c.bytes)
	}
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
// has keeps its count and allotment and takes the table's limits (set
// again in shard 0: only shard 0's allotment changed); a quota of a new
// epoch gets its usage here as allotment (ownAllotment; its count is kept,
// or made by a scan if new).
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
		newEpoch := c.epoch != d.Epoch
		c.maxNodes, c.maxBytes, c.epoch = d.MaxNodes, d.MaxBytes, d.Epoch
		if newEpoch {
			ownAllotment(&c)
		}
		if c.maxNodes == 0 {
			c.allotNodes = 0
		}
		if c.maxBytes == 0 {
			c.allotBytes = 0
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
	c.allotNodes -= int64(op.MaxNodes)
	c.allotBytes -= int64(op.MaxBytes)
	f.quota.counts.Set(c)
	p := f.quotaPeer(int(op.Shard))
	p.given++
	f.quota.peers.Set(p)
	f.quota.out.Set(quotaTransfer{recipient: p.shard, seq: p.given, prefix: op.Prefix, epoch: op.Epoch, nodes: op.MaxNodes, bytes: op.MaxBytes})
	return nil
}

// free is the room of an allotment beyond usage (0 if the allotment is
// below the usage: a debt).
func free(allot int64, usage uint64) uint64 {
	if allot <= 0 || uint64(allot) < usage {
		return 0
	}
	return uint64(allot) - usage
}

// within reports whether usage fits in allot.
func within(usage uint64, allot int64) bool {
	return allot >= 0 && usage <= uint64(allot)
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
			c.allotNodes += clampInt64(op.MaxNodes)
		}
		if c.maxBytes > 0 {
			c.allotBytes += clampInt64(op.MaxBytes)
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

// resetLedger starts every quota's allotments afresh from this shard's
// usage (ownAllotment) and forgets every transfer and sequence number:
// Reseed's fresh start. Shard 0's allotments are then set by
// ShareRestoredQuotas, which sees every shard's state.
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
		ownAllotment(&c)
		f.quota.counts.Set(c)
	}
	f.quota.peers = btree.NewBTreeGOptions(quotaPeerLess, treeOptions)
	f.quota.out = btree.NewBTreeGOptions(quotaTransferLess, treeOptions)
}

// ShareRestoredQuotas gives the reseeded states of every shard of a
// restored cluster (shards[k] is shard k's) shard 0's quota table, each
// shard other than 0 its usage as allotment and shard 0 each limit minus
// the others' usage: the allotments of a new epoch, made exactly, as no
// write runs during a restore. Room in transit in the backup is void (the
// shards' states are of slightly different moments). With one shard it
// does nothing.
func ShareRestoredQuotas(shards []*FSM) error {
	if len(shards) < 2 {
		return nil
	}
	meta := shards[0]
	if !meta.shard.meta() || meta.shard.count() != len(shards) {
		return fmt.Errorf("fsm: share restored quotas: %d states, the first %s", len(shards), meta.shard)
	}
	epoch, table := meta.QuotaTable()
	var usedNodes, usedBytes = make(map[string]uint64), make(map[string]uint64)
	for k, f := range shards[1:] {
		if f.shard.index != k+1 || f.shard.count() != len(shards) {
			return fmt.Errorf("fsm: share restored quotas: state %d is %s", k+1, f.shard)
		}
		f.applyTable(epoch, table)
		f.quota.counts.Scan(func(c quotaCount) bool {
			usedNodes[c.prefix] += c.nodes
			usedBytes[c.prefix] += c.bytes
			return true
		})
	}
	for _, d := range table {
		c, _ := meta.quota.counts.Get(quotaCount{prefix: d.Prefix})
		c.allotNodes, c.allotBytes = startAllotment(c.maxNodes, usedNodes[d.Prefix]), startAllotment(c.maxBytes, usedBytes[d.Prefix])
		meta.quota.counts.Set(c)
	}
	return nil
}

// applyTable makes table (of table epoch epoch) this shard's quota table,
// every quota with its usage here as allotment: a restore's start.
func (f *FSM) applyTable(epoch uint64, table []command.QuotaDef) {
	quotas := make([]Quota, 0, len(table))
	counts := newQuotaCounts()
	for _, d := range table {
		quotas = append(quotas, Quota{Prefix: d.Prefix, MaxNodes: d.MaxNodes, MaxBytes: d.MaxBytes})
		c := quotaCount{prefix: d.Prefix, maxNodes: d.MaxNodes, maxBytes: d.MaxBytes, epoch: d.Epoch}
		c.nodes, c.bytes = f.scanUsage(d.Prefix)
		ownAllotment(&c)
		counts.Set(c)
	}
	f.auth.quotas = quotas
	f.quota.counts = counts
	f.quota.synced = epoch
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
