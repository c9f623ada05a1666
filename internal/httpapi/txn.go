package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// txnBodyLimit bounds the body of POST /v1/txn: the transaction's paths
// and values at their limit (api.MaxTxnBytes), JSON-escaped at worst, plus
// room for the operations' other fields.
const txnBodyLimit = 6*api.MaxTxnBytes + api.MaxTxnOps*256

// txnBody is POST /v1/txn's body as first decoded: each operation is
// decoded on its own, just as strictly as a body (decodeStrict), so that
// its field names are exact too (encoding/json matches nested fields
// regardless of case).
type txnBody struct {
	Ops        []json.RawMessage `json:"ops"`
	SessionID  string            `json:"session_id"`
	RequestSeq uint64            `json:"request_seq"`
}

// decodeTxn decodes and checks a transaction body into a server request.
// An operation at fault is named by an *api.TxnOpError.
func decodeTxn(data []byte) (server.TxnRequest, error) {
	var body txnBody
	if err := decodeStrict(data, &body); err != nil {
		return server.TxnRequest{}, err
	}
	var req server.TxnRequest
	if body.SessionID != "" {
		session, err := parseID("session_id", body.SessionID)
		if err != nil {
			return server.TxnRequest{}, err
		}
		req.SessionID = session
	}
	req.RequestSeq = body.RequestSeq
	if len(body.Ops) > api.MaxTxnOps {
		return server.TxnRequest{}, api.Errorf(api.CodeTooLarge, "transaction of %d operations, over the limit of %d", len(body.Ops), api.MaxTxnOps)
	}
	req.Ops = make([]server.TxnOp, len(body.Ops))
	for i, raw := range body.Ops {
		op, err := decodeTxnOp(raw)
		if err != nil {
			var e *api.Error
			if !errors.As(err, &e) { // decodeStrict and txnOpFrom return *api.Error
				e = api.Errorf(api.CodeInvalidArgument, "%v", err)
			}
			return server.TxnRequest{}, &api.TxnOpError{Op: i, Err: e}
		}
		req.Ops[i] = op
	}
	return req, nil
}

// decodeTxnOp decodes one operation of a transaction.
func decodeTxnOp(raw json.RawMessage) (server.TxnOp, error) {
	var wire api.TxnOp
	if err := decodeStrict(raw, &wire); err != nil {
		return server.TxnOp{}, err
	}
	return txnOpFrom(&wire)
}

// txnOpFrom checks what the wire form of an operation may carry and
// returns it as the server takes it.
func txnOpFrom(wire *api.TxnOp) (server.TxnOp, error) {
	op := server.TxnOp{Path: wire.Path, Ephemeral: wire.Ephemeral, Sequential: wire.Sequential, Recursive: wire.Recursive}
	if wire.Path == "" {
		return op, api.Errorf(api.CodeInvalidArgument, `an operation needs a "path"`)
	}
	if wire.Value != nil {
		op.Value = []byte(*wire.Value)
	}
	switch wire.Op {
	case api.TxnCreate:
		op.Kind = server.TxnCreate
	case api.TxnSet:
		op.Kind = server.TxnSet
	case api.TxnDelete:
		op.Kind = server.TxnDelete
	case api.TxnCheck:
		op.Kind = server.TxnCheck
	case "":
		return op, api.Errorf(api.CodeInvalidArgument, `an operation needs an "op": create, set, delete or check`)
	default:
		return op, api.Errorf(api.CodeInvalidArgument, `unknown op %q: want create, set, delete or check`, wire.Op)
	}
	if err := checkTxnOpFields(wire); err != nil {
		return op, err
	}
	if wire.Version != nil {
		op.Precondition, op.Version = server.AtVersion, *wire.Version
		if *wire.Version == 0 {
			op.Precondition = server.NoNode
		}
	}
	return op, nil
}

// checkTxnOpFields refuses the fields an operation's kind does not take.
func checkTxnOpFields(wire *api.TxnOp) error {
	switch {
	case wire.Op == api.TxnSet && wire.Value == nil:
		return api.Errorf(api.CodeInvalidArgument, `a set needs a string "value" (give "value": "" to store an empty value)`)
	case wire.Value != nil && wire.Op != api.TxnCreate && wire.Op != api.TxnSet:
		return api.Errorf(api.CodeInvalidArgument, `a %s takes no "value"`, wire.Op)
	case (wire.Ephemeral || wire.Sequential) && wire.Op != api.TxnCreate:
		return api.Errorf(api.CodeInvalidArgument, `only a create takes "ephemeral" or "sequential"`)
	case wire.Recursive && wire.Op != api.TxnDelete:
		return api.Errorf(api.CodeInvalidArgument, `only a delete takes "recursive"`)
	case wire.Version != nil && wire.Op == api.TxnCreate:
		return api.Errorf(api.CodeInvalidArgument, `a create takes no "version": the node must not exist`)
	case wire.Version != nil && *wire.Version == 0 && wire.Op != api.TxnCheck:
		return api.Errorf(api.CodeInvalidArgument, `"version": 0 (the node must not exist) is for a check only`)
	}
	return nil
}

// txn serves POST /v1/txn.
func (h *Handler) txn(w http.ResponseWriter, r *http.Request) {
	data, err := readBody(w, r, txnBodyLimit)
	if err != nil {
		h.writeError(w, err)
		return
	}
	req, err := decodeTxn(data)
	if err != nil {
		h.writeTxnError(w, err)
		return
	}
	result, err := h.server.Txn(r.Context(), req)
	if err != nil {
		h.writeTxnError(w, err)
		return
	}
	h.writeJSONIn(w, result.Shard, result.Index, txnReply(req, result))
}

// txnReply is the JSON reply of an applied transaction.
func txnReply(req server.TxnRequest, result server.TxnResult) api.Txn {
	out := api.Txn{Results: make([]api.TxnOpResult, len(result.Ops)), Index: result.Index}
	for i, op := range result.Ops {
		out.Results[i] = api.TxnOpResult{
			Op: txnOpName(req.Ops[i].Kind), Path: op.Path, Version: op.Version,
			CreatedIndex: op.CreatedIndex, ModifiedIndex: op.ModifiedIndex,
		}
	}
	return out
}

func txnOpName(k server.TxnKind) string {
	return [...]string{api.TxnCreate, api.TxnSet, api.TxnDelete, api.TxnCheck}[k]
}

// writeTxnError writes a refusal: one operation's as the envelope with
// failed_op (docs/api.md), any other as every error is written.
func (h *Handler) writeTxnError(w http.ResponseWriter, err error) {
	var opErr *api.TxnOpError
	if !errors.As(err, &opErr) || opErr.Err == nil {
		h.writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(opErr.Err.Code.Status())
	_ = json.NewEncoder(w).Encode(api.TxnErrorBody{Error: *opErr.Err, FailedOp: opErr.Op})
}
