package fsm

import (
	"slices"
	"strings"

	"github.com/tidwall/btree"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// Quotas bound the nodes under a path prefix (the prefix's own node
// included) and the bytes of their values. Their definitions are auth
// state: set by an admin through the log (command.AuthQuotaSet), kept in
// the auth frame of snapshots. A create or set that would take a quota's
// usage past a limit is refused with quota_exceeded and changes nothing; a
// delete is never refused, and usage above a limit lowered below it stays
// until deletes bring it down.
//
// Usage is kept incrementally: every quota has a count (quotaCount) of the
// nodes and value bytes under its prefix in this state machine, changed by
// every create, set and delete (a session's end, a transaction, a
// recursive delete, a directory delete: every path that adds or removes a
// node goes through countNode). A count is made by one scan of the prefix's
// subtree when its quota is set (or arrives by a sync) and when a snapshot
// is read (counts are derived state, not written), and is then exact after
// every entry: the randomized tests compare it with a fresh scan. A checked
// write looks up the quotas on each ancestor of its path, so it costs
// O(depth of the path × log quotas), not a scan of the subtree.
//
// With one shard the limit a write is checked against is the quota's. With
// more than one, each shard holds an allotment of the quota (quota_ledger.go)
// and checks its own usage against its own allotment; the refusal then asks
// the server to move room from other shards (RedoQuotaRoom) rather than
// being the answer.

// MaxQuotas bounds the quotas of the auth state.
const MaxQuotas = 1000

// Quota is a limit on the nodes and value bytes under Prefix (0: none).
type Quota struct {
	Prefix   string
	MaxNodes uint64
	MaxBytes uint64
}

// QuotaUsage is a quota with what its prefix holds now in this state
// machine (with several shards: in this shard), and, with several shards,
// this shard's allotment of it and the quota's epoch (the index of shard
// 0's log that set it).
type QuotaUsage struct {
	Quota
	Nodes, Bytes           uint64
	AllotNodes, AllotBytes uint64
	Epoch                  uint64
}

// QuotaShortfall names a quota whose allotment in this shard a refused
// write needed more of: Nodes and Bytes are the allotment the write needed
// (its usage after the write), 0 for a dimension that had room.
type QuotaShortfall struct {
	Prefix       string
	Epoch        uint64
	Nodes, Bytes uint64
}

// quotaCount is one quota's state in this state machine: its limits (as in
// auth.quotas), its usage here and, with several shards, its epoch and
// this shard's allotment. Stored by value.
type quotaCount struct {
	prefix                 string
	maxNodes, maxBytes     uint64
	nodes, bytes           uint64
	epoch                  uint64
	allotNodes, allotBytes uint64
}

func quotaCountLess(a, b quotaCount) bool { return a.prefix < b.prefix }

func newQuotaCounts() *btree.BTreeG[quotaCount] {
	return btree.NewBTreeGOptions(quotaCountLess, treeOptions)
}

// setQuota applies AuthQuotaSet at index: in a cluster with one shard, or
// in shard 0 of a sharded one (the others receive the table by sync).
func (f *FSM) setQuota(index uint64, q Quota) *api.Error {
	if f.shard.sharded() && !f.shard.meta() {
		return api.Errorf(api.CodeInternal, "%s: quotas are set in shard 0 and reach the others by sync", f.shard)
	}
	if err := f.auth.setQuota(q); err != nil {
		return err
	}
	c, ok := f.quota.counts.Get(quotaCount{prefix: q.Prefix})
	if !ok {
		c = quotaCount{prefix: q.Prefix}
		c.nodes, c.bytes = f.scanUsage(q.Prefix)
	}
	c.maxNodes, c.maxBytes = q.MaxNodes, q.MaxBytes
	if f.shard.sharded() {
		c.epoch = index
		f.shareAllotment(&c)
		f.quota.synced = index
	}
	f.quota.counts.Set(c)
	return nil
}

// clearQuota applies AuthQuotaClear at index (where setQuota would).
func (f *FSM) clearQuota(index uint64, prefix string) *api.Error {
	if f.shard.sharded() && !f.shard.meta() {
		return api.Errorf(api.CodeInternal, "%s: quotas are cleared in shard 0 and reach the others by sync", f.shard)
	}
	if err := f.auth.clearQuota(prefix); err != nil {
		return err
	}
	f.quota.counts.Delete(quotaCount{prefix: prefix})
	if f.shard.sharded() {
		f.quota.synced = index
	}
	return nil
}

func (a *authState) setQuota(q Quota) *api.Error {
	if err := CheckPrefix(q.Prefix); err != nil {
		return err
	}
	i, found := slices.BinarySearchFunc(a.quotas, q.Prefix, func(x Quota, p string) int { return strings.Compare(x.Prefix, p) })
	if !found && len(a.quotas) >= MaxQuotas {
		return api.Errorf(api.CodeTooLarge, "the limit of %d quotas is reached", MaxQuotas)
	}
	quotas := slices.Clone(a.quotas) // replaced, never modified in place: clones share it
	if found {
		quotas[i] = q
	} else {
		quotas = slices.Insert(quotas, i, q)
	}
	a.quotas = quotas
	return nil
}

func (a *authState) clearQuota(prefix string) *api.Error {
	i, found := slices.BinarySearchFunc(a.quotas, prefix, func(x Quota, p string) int { return strings.Compare(x.Prefix, p) })
	if !found {
		return api.Errorf(api.CodeNotFound, "no quota on %q", prefix)
	}
	a.quotas = slices.Delete(slices.Clone(a.quotas), i, i+1)
	return nil
}

// countNode adds nodes (+1 a node made, -1 a node removed, 0 a value
// rewritten) and bytes (the change of value bytes) to the usage of every
// quota on path or an ancestor of it: one lookup per ancestor.
func (f *FSM) countNode(path string, nodes, bytes int64) {
	if f.quota.counts.Len() == 0 || (nodes == 0 && bytes == 0) {
		return
	}
	for p := path; ; p = api.Parent(p) {
		if c, ok := f.quota.counts.Get(quotaCount{prefix: p}); ok {
			c.nodes = uint64(int64(c.nodes) + nodes)
			c.bytes = uint64(int64(c.bytes) + bytes)
			f.quota.counts.Set(c)
		}
		if p == "/" {
			return
		}
	}
}

// checkQuotas refuses a write that adds the nodes at paths (a create and
// the ancestors it makes, each target or an ancestor of it; none for a set)
// and changes the value bytes of target by delta, if it would take a
// quota's usage past its limit (with several shards: past this shard's
// allotment, recording every quota short in f.quotaShort). Of several
// quotas refused, the error names the one with the shortest prefix.
func (f *FSM) checkQuotas(target string, paths []string, delta int64) *api.Error {
	if f.quota.counts.Len() == 0 {
		return nil
	}
	var refusal *api.Error
	for p := target; ; p = api.Parent(p) {
		if c, ok := f.quota.counts.Get(quotaCount{prefix: p}); ok {
			if err := f.checkQuota(c, target, paths, delta); err != nil {
				refusal = err
			}
		}
		if p == "/" {
			return refusal
		}
	}
}

// checkQuota is checkQuotas for the one quota c, on target or an ancestor.
func (f *FSM) checkQuota(c quotaCount, target string, paths []string, delta int64) *api.Error {
	added := uint64(0)
	for _, p := range paths {
		if PrefixCovers(c.prefix, p) {
			added++
		}
	}
	grows := delta > 0
	if added == 0 && !grows {
		return nil
	}
	nodesOver := c.maxNodes > 0 && added > 0
	bytesOver := c.maxBytes > 0 && grows
	if !f.shard.sharded() {
		switch {
		case nodesOver && c.nodes+added > c.maxNodes:
			return api.Errorf(api.CodeQuotaExceeded, "creating %q would make %d nodes under %q, over its quota of %d", target, c.nodes+added, c.prefix, c.maxNodes)
		case bytesOver && c.bytes+uint64(delta) > c.maxBytes:
			return api.Errorf(api.CodeQuotaExceeded, "writing %q would make %d bytes under %q, over its quota of %d", target, c.bytes+uint64(delta), c.prefix, c.maxBytes)
		}
		return nil
	}
	short := QuotaShortfall{Prefix: c.prefix, Epoch: c.epoch}
	if nodesOver && c.nodes+added > c.allotNodes {
		short.Nodes = c.nodes + added
	}
	if bytesOver && c.bytes+uint64(delta) > c.allotBytes {
		short.Bytes = c.bytes + uint64(delta)
	}
	if short.Nodes == 0 && short.Bytes == 0 {
		return nil
	}
	f.quotaShort = append(f.quotaShort, short)
	if short.Nodes != 0 {
		return api.Errorf(api.CodeQuotaExceeded, "creating %q would make %d nodes under %q in %s, over its allotment of %d (quota %d)",
			target, short.Nodes, c.prefix, f.shard, c.allotNodes, c.maxNodes)
	}
	return api.Errorf(api.CodeQuotaExceeded, "writing %q would make %d bytes under %q in %s, over its allotment of %d (quota %d)",
		target, short.Bytes, c.prefix, f.shard, c.allotBytes, c.maxBytes)
}

// scanUsage counts the nodes at and below prefix and their value bytes by
// a scan of the subtree. In a shard that does not hold the root, the root
// kept there (which no write changes) is no node of the cluster's.
func (f *FSM) scanUsage(prefix string) (nodes, bytes uint64) {
	count := func(e entry) {
		if e.path == "/" && f.shard.sharded() && !f.holdsNode("/") {
			return
		}
		nodes++
		bytes += uint64(len(e.value))
	}
	if prefix != "/" {
		if e, ok := f.lookup(prefix); ok {
			count(e)
		}
	}
	start := childPrefix(prefix)
	f.nodes.Ascend(entry{path: start}, func(e entry) bool {
		if !strings.HasPrefix(e.path, start) {
			return false
		}
		count(e)
		return true
	})
	return nodes, bytes
}

// recountQuotas makes the count of every quota by a scan, keeping the
// epochs and allotments: after a snapshot is read.
func (f *FSM) recountQuotas() {
	for _, q := range f.auth.quotas {
		c, _ := f.quota.counts.Get(quotaCount{prefix: q.Prefix})
		c.prefix, c.maxNodes, c.maxBytes = q.Prefix, q.MaxNodes, q.MaxBytes
		c.nodes, c.bytes = f.scanUsage(q.Prefix)
		f.quota.counts.Set(c)
	}
}

// Quotas lists the quotas by prefix with their usage now (in this shard)
// and, with several shards, this shard's allotments and their epochs.
func (f *FSM) Quotas() []QuotaUsage {
	out := make([]QuotaUsage, 0, len(f.auth.quotas))
	for _, q := range f.auth.quotas {
		out = append(out, f.quotaUsage(q))
	}
	return out
}

// QuotaShare returns the quota on prefix with its usage and allotment in
// this shard, if there is one.
func (f *FSM) QuotaShare(prefix string) (QuotaUsage, bool) {
	i, found := slices.BinarySearchFunc(f.auth.quotas, prefix, func(x Quota, p string) int { return strings.Compare(x.Prefix, p) })
	if !found {
		return QuotaUsage{}, false
	}
	return f.quotaUsage(f.auth.quotas[i]), true
}

func (f *FSM) quotaUsage(q Quota) QuotaUsage {
	c, _ := f.quota.counts.Get(quotaCount{prefix: q.Prefix})
	return QuotaUsage{Quota: q, Nodes: c.nodes, Bytes: c.bytes, AllotNodes: c.allotNodes, AllotBytes: c.allotBytes, Epoch: c.epoch}
}

// quotaKindOf reports whether kind changes quotas or their ledger only:
// such a change leaves every permission as it was.
func quotaKind(kind command.AuthKind) bool {
	switch kind {
	case command.AuthQuotaSet, command.AuthQuotaClear, command.AuthQuotaSync,
		command.AuthQuotaGive, command.AuthQuotaTake, command.AuthQuotaSettle:
		return true
	}
	return false
}
