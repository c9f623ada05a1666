package command

import (
	"encoding/binary"
	"fmt"
)

// TxnKind is the kind of one operation of a transaction (OpTxn).
type TxnKind uint8

// The operations of a transaction. The numeric values are part of the
// encoding.
const (
	// TxnCreate makes the node at Path (with Ephemeral, Sequential); it must
	// not exist. Missing ancestors are made, as a PUT makes them.
	TxnCreate TxnKind = iota
	// TxnSet writes Value to the existing node at Path, if its version is
	// Version when Precondition is PrecondVersion.
	TxnSet
	// TxnDelete deletes the node at Path (its subtree if Recursive), if its
	// version is Version when Precondition is PrecondVersion.
	TxnDelete
	// TxnCheck changes nothing: the node at Path must exist (PrecondAny),
	// must not exist (PrecondNone) or must have version Version
	// (PrecondVersion).
	TxnCheck
	txnKindCount
)

var txnKindNames = [...]string{"create", "set", "delete", "check"}

func (k TxnKind) String() string {
	if k < txnKindCount {
		return txnKindNames[k]
	}
	return fmt.Sprintf("txn_kind(%d)", uint8(k))
}

// TxnOp is one operation of a transaction. Which fields matter depends on
// Kind; the others are zero. The session of its ephemeral creates and of
// its deletes is the transaction's Command.SessionID.
type TxnOp struct {
	Kind         TxnKind
	Path         string
	Value        []byte // TxnCreate and TxnSet
	Precondition Precondition
	Version      uint64 // with PrecondVersion
	Ephemeral    bool   // TxnCreate
	Sequential   bool   // TxnCreate
	Recursive    bool   // TxnDelete
}

// Bits of a transaction operation's presence mask.
const (
	txnHasPath = 1 << iota
	txnHasValue
	txnHasVersion
	txnPresenceMask = 1<<iota - 1
)

// txnOpHeaderLen is the kind, flags and precondition bytes of an operation.
const txnOpHeaderLen = 3

// The ops section follows every other field of an OpTxn command, and only
// of an OpTxn command: the operation count (possibly 0, which the state
// machine refuses), then each operation as kind, flags (the command's
// flag bits), precondition, presence mask and the present fields in the
// order path, value, version. Commands of other ops carry no section, so
// their encoding is unchanged.

// txnSectionLen returns the length of c's ops section.
func (c *Command) txnSectionLen() int {
	if c.Op != OpTxn {
		return 0
	}
	n := uvarintLen(uint64(len(c.Ops)))
	for i := range c.Ops {
		op := &c.Ops[i]
		n += txnOpHeaderLen + uvarintLen(op.presence())
		n += optionalBytesLen(len(op.Path)) + optionalBytesLen(len(op.Value)) + optionalUvarintLen(op.Version)
	}
	return n
}

// appendTxnSection appends c's ops section to dst.
func (c *Command) appendTxnSection(dst []byte) []byte {
	if c.Op != OpTxn {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(len(c.Ops)))
	for i := range c.Ops {
		op := &c.Ops[i]
		dst = append(dst, byte(op.Kind), op.flags(), byte(op.Precondition))
		dst = binary.AppendUvarint(dst, op.presence())
		dst = appendOptionalString(dst, op.Path)
		if len(op.Value) > 0 {
			dst = binary.AppendUvarint(dst, uint64(len(op.Value)))
			dst = append(dst, op.Value...)
		}
		dst = appendOptionalUvarint(dst, op.Version)
	}
	return dst
}

func (op *TxnOp) flags() byte {
	var f byte
	if op.Ephemeral {
		f |= flagEphemeral
	}
	if op.Sequential {
		f |= flagSequential
	}
	if op.Recursive {
		f |= flagRecursive
	}
	return f
}

func (op *TxnOp) presence() uint64 {
	var m uint64
	if op.Path != "" {
		m |= txnHasPath
	}
	if len(op.Value) > 0 {
		m |= txnHasValue
	}
	if op.Version != 0 {
		m |= txnHasVersion
	}
	return m
}

// txnOps decodes the ops section of an OpTxn command. Values alias data.
func (d *decoder) txnOps() []TxnOp {
	count := d.uvarint("txn op count")
	if d.err != nil {
		return nil
	}
	// Every operation takes at least its header and mask.
	if count > uint64(len(d.data)-d.offset)/(txnOpHeaderLen+1) {
		d.fail("txn op count %d exceeds the %d remaining bytes", count, len(d.data)-d.offset)
		return nil
	}
	if count == 0 {
		return nil
	}
	var ops []TxnOp
	if uint64(cap(d.ops)) >= count {
		ops = d.ops[:count]
	} else {
		ops = make([]TxnOp, count)
	}
	for i := range ops {
		ops[i] = d.txnOp(i)
		if d.err != nil {
			return nil
		}
	}
	return ops
}

func (d *decoder) txnOp(i int) TxnOp {
	var op TxnOp
	if len(d.data)-d.offset < txnOpHeaderLen {
		d.fail("txn op %d header truncated", i)
		return op
	}
	kind, flags, precondition := d.data[d.offset], d.data[d.offset+1], d.data[d.offset+2]
	switch {
	case TxnKind(kind) >= txnKindCount:
		d.fail("txn op %d: unknown kind %d", i, kind)
	case flags&^(flagEphemeral|flagSequential|flagRecursive) != 0:
		d.fail("txn op %d: unknown flags %#x", i, flags)
	case Precondition(precondition) >= precondCount:
		d.fail("txn op %d: unknown precondition %d", i, precondition)
	}
	if d.err != nil {
		return op
	}
	d.offset += txnOpHeaderLen
	op.Kind, op.Precondition = TxnKind(kind), Precondition(precondition)
	op.Ephemeral = flags&flagEphemeral != 0
	op.Sequential = flags&flagSequential != 0
	op.Recursive = flags&flagRecursive != 0
	mask := d.uvarint("txn op presence mask")
	if d.err == nil && mask&^txnPresenceMask != 0 {
		d.fail("txn op %d: unknown presence bits %#x", i, mask&^txnPresenceMask)
	}
	op.Path = d.optionalString(mask, txnHasPath, "txn op path")
	op.Value = d.optionalBytes(mask, txnHasValue, "txn op value")
	op.Version = d.optionalUvarint(mask, txnHasVersion, "txn op version")
	return op
}
