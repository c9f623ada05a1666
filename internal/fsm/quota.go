package fsm

import (
	"slices"
	"strings"

	"github.com/latch-io/latch/api"
)

// Quotas bound the nodes under a path prefix (the prefix's own node
// included) and the bytes of their values. They are auth state: set by an
// admin through the log (command.AuthQuotaSet), kept in the auth frame of
// snapshots. A create or set that would take a quota's usage past a limit
// is refused with quota_exceeded and changes nothing; a delete is never
// refused, and usage above a limit lowered below it stays until deletes
// bring it down.
//
// Usage is not stored: it is counted from the node tree when a write
// under a quota is checked (O(nodes under the prefix)), so it is exact
// after any restart, snapshot or restore, at the cost of that scan on each
// create or set under a quota.

// MaxQuotas bounds the quotas of the auth state.
const MaxQuotas = 1000

// Quota is a limit on the nodes and value bytes under Prefix (0: none).
type Quota struct {
	Prefix   string
	MaxNodes uint64
	MaxBytes uint64
}

// QuotaUsage is a quota with what its prefix holds now.
type QuotaUsage struct {
	Quota
	Nodes, Bytes uint64
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

// checkQuotas refuses a write that adds the nodes at paths (a create and
// the ancestors it makes; none for a set) and changes the value bytes of
// target by delta, if it would take a quota past a limit.
func (f *FSM) checkQuotas(target string, paths []string, delta int64) *api.Error {
	for _, q := range f.auth.quotas {
		added := uint64(0)
		for _, p := range paths {
			if PrefixCovers(q.Prefix, p) {
				added++
			}
		}
		grows := delta > 0 && PrefixCovers(q.Prefix, target)
		if added == 0 && !grows {
			continue
		}
		nodes, bytes := f.usage(q.Prefix)
		if q.MaxNodes > 0 && added > 0 && nodes+added > q.MaxNodes {
			return api.Errorf(api.CodeQuotaExceeded, "creating %q would make %d nodes under %q, over its quota of %d", target, nodes+added, q.Prefix, q.MaxNodes)
		}
		if q.MaxBytes > 0 && grows && bytes+uint64(delta) > q.MaxBytes {
			return api.Errorf(api.CodeQuotaExceeded, "writing %q would make %d bytes under %q, over its quota of %d", target, bytes+uint64(delta), q.Prefix, q.MaxBytes)
		}
	}
	return nil
}

// usage counts the nodes at and below prefix and their value bytes.
func (f *FSM) usage(prefix string) (nodes, bytes uint64) {
	count := func(e entry) {
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

// Quotas lists the quotas by prefix with their usage now.
func (f *FSM) Quotas() []QuotaUsage {
	out := make([]QuotaUsage, 0, len(f.auth.quotas))
	for _, q := range f.auth.quotas {
		nodes, bytes := f.usage(q.Prefix)
		out = append(out, QuotaUsage{Quota: q, Nodes: nodes, Bytes: bytes})
	}
	return out
}
