package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// readBodyLimit bounds the body of POST /v1/read: its paths at their
// longest, JSON-escaped at worst, with room for the other fields.
const readBodyLimit = api.MaxTxnOps * (6*api.MaxPathLen + 64)

// readManyBody is POST /v1/read's body as first decoded; each read is then
// decoded as strictly as a body (see txnBody).
type readManyBody struct {
	Reads []json.RawMessage `json:"reads"`
}

// decodeReadMany decodes a multi-read body; a read at fault is named by an
// *api.TxnOpError.
func decodeReadMany(data []byte) ([]server.ReadOp, error) {
	var body readManyBody
	if err := decodeStrict(data, &body); err != nil {
		return nil, err
	}
	if len(body.Reads) > api.MaxTxnOps {
		return nil, api.Errorf(api.CodeTooLarge, "multi-read of %d reads, over the limit of %d", len(body.Reads), api.MaxTxnOps)
	}
	reads := make([]server.ReadOp, len(body.Reads))
	for i, raw := range body.Reads {
		var wire api.ReadOp
		err := decodeStrict(raw, &wire)
		if err == nil {
			err = api.ValidatePath(wire.Path)
		}
		if err != nil {
			var e *api.Error
			if !errors.As(err, &e) {
				e = api.Errorf(api.CodeInvalidArgument, "%v", err)
			}
			return nil, &api.TxnOpError{Op: i, Err: e}
		}
		reads[i] = server.ReadOp{Path: wire.Path, Children: wire.Children}
	}
	return reads, nil
}

// readMany serves POST /v1/read.
func (h *Handler) readMany(w http.ResponseWriter, r *http.Request) {
	p := requestParams(r, readParams...)
	opts := p.readOptions()
	if p.err != nil {
		h.writeError(w, p.err)
		return
	}
	data, err := readBody(w, r, readBodyLimit)
	if err != nil {
		h.writeError(w, err)
		return
	}
	reads, err := decodeReadMany(data)
	if err != nil {
		h.writeTxnError(w, err)
		return
	}
	result, err := h.server.ReadMany(r.Context(), reads, opts)
	if err != nil {
		h.writeError(w, err)
		return
	}
	h.writeJSONIn(w, result.Shard, result.Index, readManyReply(reads, result))
}

func readManyReply(reads []server.ReadOp, result server.ReadManyResult) api.ReadResults {
	out := api.ReadResults{Results: make([]api.ReadResult, len(result.Results)), Index: result.Index}
	for i, r := range result.Results {
		switch {
		case r.Err != nil:
			out.Results[i].Error = r.Err
		case reads[i].Children:
			out.Results[i].Children = &api.Children{Path: reads[i].Path, Children: r.Children, Index: r.Index, Shard: r.Shard}
		default:
			node := r.Node
			node.Index = result.Index
			out.Results[i].Node = &node
		}
	}
	return out
}
