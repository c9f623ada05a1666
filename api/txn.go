package api

import "fmt"

// Limits of a transaction (POST /v1/txn).
const (
	// MaxTxnOps is the most operations one transaction may hold.
	MaxTxnOps = 128
	// MaxTxnBytes bounds the paths and values of one transaction's
	// operations, summed, so that its log entry stays small.
	MaxTxnBytes = 256 << 10
)

// The operations of a transaction, as TxnOp.Op names them.
const (
	TxnCreate = "create" // make a node that must not exist
	TxnSet    = "set"    // write an existing node
	TxnDelete = "delete" // delete an existing node
	TxnCheck  = "check"  // change nothing; the node must exist, have a version, or be absent
)

// TxnOp is one operation of a transaction. Version is a precondition: for
// set, delete and check the node's version must equal it; 0, on a check
// only, means the node must not exist. Without it a set, delete or check
// needs the node to exist, whatever its version. Value is required by set,
// optional on create (empty), refused elsewhere.
type TxnOp struct {
	Op         string  `json:"op"`
	Path       string  `json:"path"`
	Value      *string `json:"value,omitempty"`
	Version    *uint64 `json:"version,omitempty"`
	Ephemeral  bool    `json:"ephemeral,omitempty"`
	Sequential bool    `json:"sequential,omitempty"`
	Recursive  bool    `json:"recursive,omitempty"`
}

// TxnRequest is the body of POST /v1/txn: operations applied in order, all
// or nothing, at one raft index. SessionID is the session of ephemeral
// creates and of deletes of its own ephemeral nodes; with RequestSeq it
// makes the transaction exactly-once, like a node write.
type TxnRequest struct {
	Ops        []TxnOp `json:"ops"`
	SessionID  string  `json:"session_id,omitempty"`
	RequestSeq uint64  `json:"request_seq,omitempty"`
}

// TxnOpResult is the node one operation left, right after it: the created
// node (with its sequential name), the node set, the node deleted (as it
// was), the node checked (its path only when it had to be absent).
type TxnOpResult struct {
	Op            string `json:"op"`
	Path          string `json:"path"`
	Version       uint64 `json:"version"`
	CreatedIndex  uint64 `json:"created_index"`
	ModifiedIndex uint64 `json:"modified_index"`
}

// Txn is the reply to a transaction that was applied: one result per
// operation, in order, and the index it was applied at.
type Txn struct {
	Results []TxnOpResult `json:"results"`
	Index   uint64        `json:"index"`
}

// TxnErrorBody is the error reply of a transaction refused because of one
// of its operations: the envelope plus that operation's index (from 0).
// Nothing of the transaction was applied.
type TxnErrorBody struct {
	Error    Error `json:"error"`
	FailedOp int   `json:"failed_op"`
}

// TxnOpError is a transaction refused because of its operation Op (from
// 0): Err says why; no operation was applied. errors.As finds the *Error
// inside it.
type TxnOpError struct {
	Op  int
	Err *Error
}

func (e *TxnOpError) Error() string { return fmt.Sprintf("transaction operation %d: %v", e.Op, e.Err) }

// Unwrap returns the operation's *Error.
func (e *TxnOpError) Unwrap() error { return e.Err }

// ReadOp is one read of POST /v1/read: the node at Path, or with Children
// its children's names.
type ReadOp struct {
	Path     string `json:"path"`
	Children bool   `json:"children,omitempty"`
}

// ReadRequest is the body of POST /v1/read.
type ReadRequest struct {
	Reads []ReadOp `json:"reads"`
}

// ReadResult is one read's outcome: exactly one of Node, Children (as GET
// /v1/kv/{path} and ?children=true reply, with the multi-read's index, or
// for children living in another shard, with that shard's index and
// Children.Shard) and Error (that read's refusal; the others stand).
type ReadResult struct {
	Node     *Node     `json:"node,omitempty"`
	Children *Children `json:"children,omitempty"`
	Error    *Error    `json:"error,omitempty"`
}

// ReadResults is the reply to POST /v1/read: a result per read, all at
// Index.
type ReadResults struct {
	Results []ReadResult `json:"results"`
	Index   uint64       `json:"index"`
}
