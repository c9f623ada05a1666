package httpapi

import (
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// FuzzTxnDecode: any body given to POST /v1/read's decoding yields valid
// paths or a 4xx API error; any body given to POST /v1/txn's yields either a
// request whose every operation has a known kind, a path, and only the
// fields its kind takes, or a 4xx API error; never a panic.
func FuzzTxnDecode(f *testing.F) {
	f.Add(`{"ops":[{"op":"create","path":"/a","value":"x","ephemeral":true,"sequential":true}],"session_id":"0x1","request_seq":2}`)
	f.Add(`{"ops":[{"op":"set","path":"/a","value":"","version":3},{"op":"delete","path":"/b","recursive":true},{"op":"check","path":"/c","version":0}]}`)
	f.Add(`{"ops":[{"OP":"check","path":"/a"}]}`)
	f.Add(`{"ops":[{"op":"check","path":"/a","path":"/b"}]}`)
	f.Add(`{"ops":[[{"op":"check"}]],"ops":[]}`)
	f.Add(`{"ops":[{"op":"set","path":"/\ud800"}]}`)
	f.Add(`{"reads":[{"path":"/a","children":true},{"path":"/b"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		if reads, err := decodeReadMany([]byte(body)); err != nil {
			checkAPIError(t, err)
		} else {
			for i, read := range reads {
				if api.ValidatePath(read.Path) != nil {
					t.Fatalf("read %d accepted with path %q", i, read.Path)
				}
			}
		}
		req, err := decodeTxn([]byte(body))
		if err != nil {
			checkAPIError(t, err)
			return
		}
		for i, op := range req.Ops {
			if op.Kind > server.TxnCheck || op.Path == "" {
				t.Fatalf("op %d accepted with kind %d, path %q", i, op.Kind, op.Path)
			}
			if (op.Ephemeral || op.Sequential) && op.Kind != server.TxnCreate || op.Recursive && op.Kind != server.TxnDelete {
				t.Fatalf("op %d accepted with flags its kind %d does not take", i, op.Kind)
			}
		}
	})
}
