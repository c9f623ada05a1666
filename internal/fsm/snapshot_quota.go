package fsm

import (
	"encoding/binary"
)

// writeLedger writes the quota ledger frames of a version-19-to-33
// snapshot (see snapshot.go).
func (f *FSM) writeLedger(sw *snapshotWriter) {
	sw.frame(frameQuotaLedger, func(b []byte) []byte {
		b = binary.AppendUvarint(b, f.quota.synced)
		b = binary.AppendUvarint(b, uint64(f.quota.peers.Len()))
		f.quota.peers.Scan(func(p quotaPeer) bool {
			b = binary.AppendUvarint(b, uint64(p.shard))
			b = binary.AppendUvarint(b, p.given)
			b = binary.AppendUvarint(b, p.taken)
			return true
		})
		b = binary.AppendUvarint(b, uint64(len(f.auth.quotas)))
		for _, q := range f.auth.quotas {
			c, _ := f.quota.counts.Get(quotaCount{prefix: q.Prefix})
			b = binary.AppendUvarint(b, c.epoch)
			b = binary.AppendUvarint(b, c.allotNodes)
			b = binary.AppendUvarint(b, c.allotBytes)
		}
		return binary.AppendUvarint(b, uint64(f.quota.out.Len()))
	})
	f.quota.out.Scan(func(t quotaTransfer) bool {
		sw.frame(frameQuotaTransfer, func(b []byte) []byte {
			b = binary.AppendUvarint(b, uint64(t.recipient))
			b = binary.AppendUvarint(b, t.seq)
			b = appendString(b, t.prefix)
			b = binary.AppendUvarint(b, t.epoch)
			b = binary.AppendUvarint(b, t.nodes)
			return binary.AppendUvarint(b, t.bytes)
		})
		return sw.err == nil
	})
}

// readQuotaLedger reads the ledger frames into f, if the version has them,
// checking what Apply keeps: peers of this cluster, sorted, not this
// shard, with a sequence number; one epoch and allotment per quota; the
// transfers sorted, each given to a peer and not past its last seq. A
// sharded state with quotas must have its ledger, and only a sharded one
// has one.
func (sr *snapshotReader) readQuotaLedger(f *FSM) error {
	if !sr.ledger {
		if f.shard.sharded() && len(f.auth.quotas) > 0 {
			return corruptf(sr.offset, "%s has quotas but no quota ledger", f.shard)
		}
		return nil
	}
	if !f.shard.sharded() {
		return corruptf(sr.offset, "a quota ledger in the state of a cluster with one shard")
	}
	d, err := sr.frame(frameQuotaLedger)
	if err != nil {
		return err
	}
	f.quota.synced = d.uvarint()
	peers := d.uvarint()
	if d.err == nil && peers >= uint64(f.shard.count()) {
		d.fail(d.base, "%d quota peers in a cluster of %d shards", peers, f.shard.count())
	}
	previous := -1
	for i := uint64(0); i < peers && d.err == nil; i++ {
		p := quotaPeer{shard: int(d.uvarint()), given: d.uvarint(), taken: d.uvarint()}
		switch {
		case d.err != nil:
		case p.shard <= previous || p.shard >= f.shard.count() || p.shard == f.shard.index || p.given|p.taken == 0:
			d.fail(d.base, "bad quota peer %d", p.shard)
		}
		f.quota.peers.Set(p)
		previous = p.shard
	}
	quotas := d.uvarint()
	if d.err == nil && quotas != uint64(len(f.auth.quotas)) {
		d.fail(d.base, "%d quota allotments for %d quotas", quotas, len(f.auth.quotas))
	}
	for i := 0; uint64(i) < quotas && d.err == nil; i++ {
		q := f.auth.quotas[i]
		c := quotaCount{prefix: q.Prefix, maxNodes: q.MaxNodes, maxBytes: q.MaxBytes, epoch: d.uvarint(), allotNodes: d.uvarint(), allotBytes: d.uvarint()}
		if d.err == nil && (c.epoch == 0 || c.epoch > f.quota.synced) {
			d.fail(d.base, "quota on %q has epoch %d, table epoch %d", q.Prefix, c.epoch, f.quota.synced)
		}
		f.quota.counts.Set(c)
	}
	transfers := d.uvarint()
	if d.err == nil && f.ledgerEmpty() {
		d.fail(d.base, "an empty quota ledger in a format that holds one")
	}
	if err := d.finish(); err != nil {
		return err
	}
	return sr.readQuotaTransfers(f, transfers)
}

func (sr *snapshotReader) readQuotaTransfers(f *FSM, count uint64) error {
	var previous quotaTransfer
	for i := uint64(0); i < count; i++ {
		d, err := sr.frame(frameQuotaTransfer)
		if err != nil {
			return err
		}
		t := quotaTransfer{recipient: int(d.uvarint()), seq: d.uvarint(), prefix: d.string(), epoch: d.uvarint(), nodes: d.uvarint(), bytes: d.uvarint()}
		p, known := f.quota.peers.Get(quotaPeer{shard: t.recipient})
		switch {
		case d.err != nil:
		case !known || t.seq == 0 || t.seq > p.given:
			d.fail(d.base, "transfer %d to shard %d beyond the sequence numbers given", t.seq, t.recipient)
		case i > 0 && !quotaTransferLess(previous, t):
			d.fail(d.base, "quota transfers out of order")
		case CheckPrefix(t.prefix) != nil || t.epoch == 0 || t.nodes|t.bytes == 0:
			d.fail(d.base, "bad quota transfer on %q", t.prefix)
		}
		if err := d.finish(); err != nil {
			return err
		}
		f.quota.out.Set(t)
		previous = t
	}
	return nil
}
