package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestTxnEndpoint drives POST /v1/txn on a one-node cluster: an applied
// transaction and its results, a retry answered from the exactly-once
// window, every refusal with its code and failed_op, and that a refusal
// changes nothing (refusals before the log do not even move the index).
func TestTxnEndpoint(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, p := range []string{"/acct/a", "/acct/b"} {
		if _, err := testcluster.Put(ctx, base, p, "10", ""); err != nil {
			t.Fatal(err)
		}
	}
	// The session outlives the test (the maximum timeout; no heartbeats
	// needed), and the server's one-time announcement of its client address
	// is applied before the checks that the index stays put.
	session, err := testcluster.CreateSession(ctx, base, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitClientAddress(t, c)

	body := `{"session_id":"` + session.SessionID + `","request_seq":1,"ops":[
		{"op":"check","path":"/acct/a","version":1},
		{"op":"set","path":"/acct/a","value":"5","version":1},
		{"op":"set","path":"/acct/b","value":"15"},
		{"op":"create","path":"/acct/log-","value":"a->b 5","sequential":true},
		{"op":"create","path":"/acct/me","ephemeral":true},
		{"op":"check","path":"/acct/none","version":0}]}`
	status, reply := send(t, ctx, "POST", base+"/v1/txn", body)
	var txn api.Txn
	if err := json.Unmarshal(reply, &txn); status != 200 || err != nil || len(txn.Results) != 6 {
		t.Fatalf("txn: status %d %s", status, reply)
	}
	if r := txn.Results[1]; r.Op != "set" || r.Path != "/acct/a" || r.Version != 2 || r.ModifiedIndex != txn.Index {
		t.Errorf("set result %+v at index %d", r, txn.Index)
	}
	if r := txn.Results[3]; !strings.HasPrefix(r.Path, "/acct/log-") || len(r.Path) != len("/acct/log-")+api.SequenceDigits {
		t.Errorf("sequential create result %+v", r)
	}
	_, retry := send(t, ctx, "POST", base+"/v1/txn", body)
	var again api.Txn
	if err := json.Unmarshal(retry, &again); err != nil || again.Results[3].Path != txn.Results[3].Path || again.Index == txn.Index {
		t.Errorf("retry answered %s, want the first results at a new index", retry)
	}
	if n, err := testcluster.Get(ctx, base, "/acct/b", ""); err != nil || n.Value != "15" || n.Version != 2 {
		t.Errorf("/acct/b after the txn and its retry: %+v %v", n, err)
	}

	tooMany := `{"ops":[` + strings.TrimSuffix(strings.Repeat(`{"op":"check","path":"/a"},`, api.MaxTxnOps+1), ",") + `]}`
	bigValue := strings.Repeat("x", 1025)
	tests := []struct {
		name     string
		body     string
		code     api.Code
		failedOp int  // -1: no failed_op
		applied  bool // reaches the log (the state machine refuses it)
	}{
		{"empty body", ``, api.CodeInvalidArgument, -1, false},
		{"no ops", `{"ops":[]}`, api.CodeInvalidArgument, -1, false},
		{"bad json", `{"ops":[`, api.CodeInvalidArgument, -1, false},
		{"unknown field", `{"ops":[{"op":"check","path":"/a"}],"ttl":1}`, api.CodeInvalidArgument, -1, false},
		{"null ops", `{"ops":null}`, api.CodeInvalidArgument, -1, false},
		{"ops not an array", `{"ops":{}}`, api.CodeInvalidArgument, -1, false},
		{"bad session id", `{"session_id":"zz","ops":[{"op":"check","path":"/a"}]}`, api.CodeInvalidArgument, -1, false},
		{"request_seq without session", `{"request_seq":3,"ops":[{"op":"check","path":"/a"}]}`, api.CodeInvalidArgument, -1, false},
		{"too many ops", tooMany, api.CodeTooLarge, -1, false},
		{"body too large", `{"ops":[{"op":"set","path":"/a","value":"` + strings.Repeat("y", 2<<20) + `"}]}`, api.CodeTooLarge, -1, false},
		{"op field in another case", `{"ops":[{"op":"check","path":"/a"},{"OP":"check","path":"/a"}]}`, api.CodeInvalidArgument, 1, false},
		{"unknown op field", `{"ops":[{"op":"check","path":"/a","ttl":2}]}`, api.CodeInvalidArgument, 0, false},
		{"op not an object", `{"ops":["check"]}`, api.CodeInvalidArgument, 0, false},
		{"unknown op", `{"ops":[{"op":"rename","path":"/a"}]}`, api.CodeInvalidArgument, 0, false},
		{"missing op", `{"ops":[{"path":"/a"}]}`, api.CodeInvalidArgument, 0, false},
		{"missing path", `{"ops":[{"op":"check"}]}`, api.CodeInvalidArgument, 0, false},
		{"bad path", `{"ops":[{"op":"check","path":"/a"},{"op":"check","path":"a/../b"}]}`, api.CodeInvalidArgument, 1, false},
		{"set without value", `{"ops":[{"op":"set","path":"/acct/a"}]}`, api.CodeInvalidArgument, 0, false},
		{"value on a delete", `{"ops":[{"op":"delete","path":"/acct/a","value":"x"}]}`, api.CodeInvalidArgument, 0, false},
		{"ephemeral set", `{"ops":[{"op":"set","path":"/acct/a","value":"x","ephemeral":true}]}`, api.CodeInvalidArgument, 0, false},
		{"recursive check", `{"ops":[{"op":"check","path":"/acct","recursive":true}]}`, api.CodeInvalidArgument, 0, false},
		{"create with a version", `{"ops":[{"op":"create","path":"/n","version":1}]}`, api.CodeInvalidArgument, 0, false},
		{"version 0 on a delete", `{"ops":[{"op":"delete","path":"/acct/a","version":0}]}`, api.CodeInvalidArgument, 0, false},
		{"negative version", `{"ops":[{"op":"check","path":"/acct/a","version":-1}]}`, api.CodeInvalidArgument, -1, false},
		{"value too large", `{"ops":[{"op":"check","path":"/acct/a"},{"op":"set","path":"/acct/a","value":"` + bigValue + `"}]}`, api.CodeTooLarge, 1, false},
		{"ephemeral without session", `{"ops":[{"op":"create","path":"/e","ephemeral":true}]}`, api.CodeInvalidArgument, 0, false},
		{"reserved tree", `{"ops":[{"op":"create","path":"/locks/x"}]}`, api.CodeInvalidArgument, 0, false},
		{"unknown session", `{"session_id":"0x00000000000000ff","ops":[{"op":"create","path":"/n"}]}`, api.CodeSessionExpired, -1, true},
		{"create over a node", `{"ops":[{"op":"create","path":"/n1"},{"op":"create","path":"/acct/a"}]}`, api.CodePreconditionFailed, 1, true},
		{"stale version", `{"ops":[{"op":"set","path":"/acct/b","value":"0"},{"op":"set","path":"/acct/a","value":"0","version":1}]}`, api.CodePreconditionFailed, 1, true},
		{"check of a missing node", `{"ops":[{"op":"delete","path":"/acct/b"},{"op":"check","path":"/acct/b"}]}`, api.CodeNotFound, 1, true},
		{"delete of a directory", `{"ops":[{"op":"delete","path":"/acct"}]}`, api.CodePreconditionFailed, 0, true},
		{"another session's ephemeral", `{"ops":[{"op":"delete","path":"/acct/me"}]}`, api.CodePreconditionFailed, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wasIndex := c.Nodes[0].Server.AppliedIndex()
			a, _ := testcluster.Get(ctx, base, "/acct/a", "")
			status, reply := send(t, ctx, "POST", base+"/v1/txn", tt.body)
			var e struct {
				Error    api.Error `json:"error"`
				FailedOp *int      `json:"failed_op"`
			}
			if err := json.Unmarshal(reply, &e); err != nil || e.Error.Code != tt.code || e.Error.Message == "" || status != tt.code.Status() {
				t.Fatalf("status %d body %s; want code %s", status, reply, tt.code)
			}
			switch {
			case tt.failedOp < 0 && e.FailedOp != nil:
				t.Errorf("failed_op %d in %s, want none", *e.FailedOp, reply)
			case tt.failedOp >= 0 && (e.FailedOp == nil || *e.FailedOp != tt.failedOp):
				t.Errorf("reply %s, want failed_op %d", reply, tt.failedOp)
			}
			if moved := c.Nodes[0].Server.AppliedIndex() != wasIndex; moved != tt.applied {
				t.Errorf("applied index moved: %v, want %v", moved, tt.applied)
			}
			if now, _ := testcluster.Get(ctx, base, "/acct/a", ""); now.Version != a.Version || now.Value != a.Value {
				t.Errorf("/acct/a changed from %+v to %+v", a, now)
			}
			if _, err := testcluster.Get(ctx, base, "/acct/b", ""); err != nil {
				t.Errorf("/acct/b: %v", err)
			}
		})
	}
}

// TestTxnMethods: /v1/txn takes POST only.
func TestTxnMethods(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	status, reply := send(t, ctx, "GET", c.URL(0)+"/v1/txn", "")
	if status != 405 || !strings.Contains(string(reply), "method_not_allowed") {
		t.Fatalf("GET /v1/txn: %d %s", status, reply)
	}
	status, _ = send(t, ctx, "POST", c.URL(0)+"/v1/txn?x=1", `{"ops":[{"op":"check","path":"/"}]}`)
	if status != 400 {
		t.Fatalf("unknown parameter: status %d", status)
	}
}

// TestReadEndpoint drives POST /v1/read: several reads at one index, each
// failing on its own, and every refusal of the request as a whole.
func TestReadEndpoint(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := testcluster.Put(ctx, base, "/r/a", "va", ""); err != nil {
		t.Fatal(err)
	}
	status, reply := send(t, ctx, "POST", base+"/v1/read?consistency=stale",
		`{"reads":[{"path":"/r/a"},{"path":"/r","children":true},{"path":"/r/missing"}]}`)
	var got api.ReadResults
	if err := json.Unmarshal(reply, &got); status != 200 || err != nil || len(got.Results) != 3 {
		t.Fatalf("read: status %d %s", status, reply)
	}
	if n := got.Results[0].Node; n == nil || n.Value != "va" || n.Index != got.Index || got.Results[0].Error != nil {
		t.Errorf("node result %s", reply)
	}
	if ch := got.Results[1].Children; ch == nil || len(ch.Children) != 1 || ch.Children[0] != "a" {
		t.Errorf("children result %s", reply)
	}
	if e := got.Results[2].Error; e == nil || e.Code != api.CodeNotFound || got.Results[2].Node != nil {
		t.Errorf("missing node result %s", reply)
	}
	tooMany := `{"reads":[` + strings.TrimSuffix(strings.Repeat(`{"path":"/a"},`, api.MaxTxnOps+1), ",") + `]}`
	tests := []struct {
		name, query, body string
		code              api.Code
		failed            int
	}{
		{"no read", "", `{"reads":[]}`, api.CodeInvalidArgument, -1},
		{"too many", "", tooMany, api.CodeTooLarge, -1},
		{"unknown field", "", `{"reads":[{"path":"/a"}],"x":1}`, api.CodeInvalidArgument, -1},
		{"read field in another case", "", `{"reads":[{"path":"/a"},{"Path":"/a"}]}`, api.CodeInvalidArgument, 1},
		{"bad path", "", `{"reads":[{"path":"a"}]}`, api.CodeInvalidArgument, 0},
		{"bad consistency", "?consistency=eventual", `{"reads":[{"path":"/a"}]}`, api.CodeInvalidArgument, -1},
		{"unknown parameter", "?children=true", `{"reads":[{"path":"/a"}]}`, api.CodeInvalidArgument, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, reply := send(t, ctx, "POST", base+"/v1/read"+tt.query, tt.body)
			var e struct {
				Error    api.Error `json:"error"`
				FailedOp *int      `json:"failed_op"`
			}
			if err := json.Unmarshal(reply, &e); err != nil || e.Error.Code != tt.code || status != tt.code.Status() {
				t.Fatalf("status %d body %s; want %s", status, reply, tt.code)
			}
			if (tt.failed < 0) != (e.FailedOp == nil) || e.FailedOp != nil && *e.FailedOp != tt.failed {
				t.Errorf("reply %s, want failed_op %d", reply, tt.failed)
			}
		})
	}
}
