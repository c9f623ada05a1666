package fsm

import "encoding/binary"

// The transaction part of a record in snapshot format version 3.
const (
	txnPartNone      = 0 // the result of a single write
	txnPartCommitted = 1 // an applied transaction: its operations' results
	txnPartFailed    = 2 // a refused transaction: the failed operation's index
)

// holdsTxnResults reports whether an exactly-once window holds a
// transaction's result, so the snapshot needs format version 3.
func (f *FSM) holdsTxnResults() bool {
	found := false
	f.sessions.Scan(func(s session) bool {
		if s.dedup != nil {
			for _, r := range s.dedup.records {
				found = found || r.result.Txn != nil
			}
		}
		return !found
	})
	return found
}

// appendTxnResult appends the transaction part of a record whose result
// is refused (has an error) or not.
func appendTxnResult(b []byte, txn *TxnResult, refused bool) []byte {
	switch {
	case txn == nil:
		return append(b, txnPartNone)
	case refused:
		return binary.AppendUvarint(append(b, txnPartFailed), uint64(txn.Failed))
	}
	b = binary.AppendUvarint(append(b, txnPartCommitted), uint64(len(txn.Ops)))
	for _, op := range txn.Ops {
		b = appendString(b, op.Node.Path)
		b = binary.AppendUvarint(b, op.Node.Version)
		b = binary.AppendUvarint(b, op.Node.CreatedIndex)
		b = binary.AppendUvarint(b, op.Node.ModifiedIndex)
		b = binary.AppendUvarint(b, op.Owner)
		b = binary.AppendUvarint(b, uint64(op.DataLength))
		b = binary.AppendUvarint(b, uint64(op.ChildrenCount))
	}
	return b
}

// maxSnapshotInt bounds the lengths and counts read back as Go ints.
const maxSnapshotInt = 1 << 40

// txnResult decodes the transaction part of a record whose result is
// refused or not; it must be the part appendTxnResult writes for it.
func (d *payloadDecoder) txnResult(refused bool) *TxnResult {
	at := d.at()
	switch part := d.byte(); {
	case d.err != nil:
		return nil
	case part == txnPartNone:
		return nil
	case part == txnPartFailed && refused:
		failed := d.uvarint()
		if failed > maxSnapshotInt {
			d.fail(at, "failed operation index %d out of range", failed)
		}
		return &TxnResult{Failed: int(failed)}
	case part == txnPartCommitted && !refused:
		return d.committedTxn(at)
	default:
		d.fail(at, "transaction part %d does not fit a result refused=%v", part, refused)
		return nil
	}
}

func (d *payloadDecoder) committedTxn(at int64) *TxnResult {
	count := d.uvarint()
	// Every operation takes at least 7 bytes.
	if d.err == nil && (count == 0 || count > uint64(len(d.data)-d.pos)/7) {
		d.fail(at, "transaction of %d operations in a frame of %d remaining bytes", count, len(d.data)-d.pos)
	}
	if d.err != nil {
		return nil
	}
	txn := &TxnResult{Ops: make([]TxnOpResult, count)}
	for i := range txn.Ops {
		op := &txn.Ops[i]
		op.Node = NodeMeta{Path: d.string(), Version: d.uvarint(), CreatedIndex: d.uvarint(), ModifiedIndex: d.uvarint()}
		op.Owner = d.uvarint()
		dataLength, children := d.uvarint(), d.uvarint()
		if dataLength > maxSnapshotInt || children > maxSnapshotInt {
			d.fail(at, "operation %d: length or count out of range", i)
		}
		op.DataLength, op.ChildrenCount = int(dataLength), int(children)
	}
	return txn
}
