package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/faulthttp"
)

// TestTxnCommit: a transaction's results per operation; a refusal is an
// *api.TxnOpError naming the operation and wrapping its *api.Error, and
// changes nothing.
func TestTxnCommit(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 1)
	c := newTestClient(t, cluster.URLs(), nil)
	ctx := context.Background()
	for _, p := range []string{"/acct/a", "/acct/b"} {
		if _, err := c.Put(ctx, p, "10"); err != nil {
			t.Fatal(err)
		}
	}
	reply, err := c.Txn().
		Check("/acct/a", PrevVersion(1)).
		Set("/acct/a", "5", PrevVersion(1)).
		Set("/acct/b", "15").
		Create("/acct/log-", "a->b", Sequential()).
		Check("/acct/none", PrevNone()).
		Commit(ctx)
	if err != nil || len(reply.Results) != 5 || reply.Results[1].Version != 2 || !strings.HasPrefix(reply.Results[3].Path, "/acct/log-0") {
		t.Fatalf("Commit = %+v, %v", reply, err)
	}
	if c.LastIndex() < reply.Index {
		t.Errorf("client index %d below the transaction's %d", c.LastIndex(), reply.Index)
	}

	_, err = c.Txn().Set("/acct/a", "0").Delete("/acct/b", PrevVersion(1)).Commit(ctx)
	var opErr *api.TxnOpError
	if !errors.As(err, &opErr) || opErr.Op != 1 || !isCode(err, api.CodePreconditionFailed) {
		t.Fatalf("refused Commit = %v, want operation 1 precondition_failed", err)
	}
	if node, err := c.Get(ctx, "/acct/a"); err != nil || node.Value != "5" {
		t.Fatalf("/acct/a after a refused transaction = %+v, %v", node, err)
	}
	if _, err := c.Txn().Commit(ctx); !isCode(err, api.CodeInvalidArgument) || errors.As(err, &opErr) {
		t.Fatalf("empty Commit = %v, want invalid_argument of no operation", err)
	}
}

// TestTxnBuilderMistakes are refused before anything is sent.
func TestTxnBuilderMistakes(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, []string{"http://127.0.0.1:1"}, nil)
	s := &Session{client: c, id: "0x1"}
	tests := []struct {
		name string
		txn  *Txn
	}{
		{"bad path", c.Txn().Check("/a/")},
		{"ephemeral without session", c.Txn().Create("/e", "", Ephemeral())},
		{"session per operation", c.Txn().Set("/a", "", WithSession(s))},
		{"create with a version", c.Txn().Create("/a", "", PrevVersion(1))},
		{"set requiring absence", c.Txn().Set("/a", "", PrevNone())},
		{"sequential delete", c.Txn().Delete("/a", Sequential())},
		{"recursive check", c.Txn().Check("/a", Recursive())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.txn.Commit(context.Background()); !isCode(err, api.CodeInvalidArgument) {
				t.Fatalf("Commit = %v, want invalid_argument", err)
			}
		})
	}
}

// TestTxnRetryAppliesOnce: a session's transaction whose reply is lost is
// resent with the same request_seq and applied once.
func TestTxnRetryAppliesOnce(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 2)
	c := newTestClient(t, cluster.URLs(), nil)
	ctx := context.Background()
	s, err := c.NewSession(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	drop := faulthttp.Fault{Method: "POST", Path: "/v1/txn", Times: 1, Kind: faulthttp.ForwardThenDrop}
	cluster.Proxy(0).Inject(drop)
	cluster.Proxy(1).Inject(drop)
	reply, err := c.Txn().WithSession(s).Create("/q/j-", "", Sequential()).Create("/q/me", "", Ephemeral()).Commit(ctx)
	if err != nil {
		t.Fatalf("Commit after dropped replies: %v", err)
	}
	if sent := cluster.Proxy(0).Count("POST", "/v1/txn") + cluster.Proxy(1).Count("POST", "/v1/txn"); sent < 2 {
		t.Fatalf("the transaction was sent %d times, want a retry", sent)
	}
	children, err := c.Children(ctx, "/q")
	if err != nil || len(children.Children) != 2 || "/q/"+children.Children[0] != reply.Results[0].Path {
		t.Fatalf("Children = %+v, %v; want exactly %s and me", children, err, reply.Results[0].Path)
	}
}

// TestReadMany: several reads at one index, each failing on its own.
func TestReadMany(t *testing.T) {
	t.Parallel()
	cluster := newCluster(t, 1)
	c := newTestClient(t, cluster.URLs(), nil)
	ctx := context.Background()
	if _, err := c.Put(ctx, "/rm/a", "va"); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]ReadOption{nil, {Stale()}} {
		got, err := c.ReadMany(ctx, []api.ReadOp{{Path: "/rm/a"}, {Path: "/rm", Children: true}, {Path: "/rm/none"}}, opts...)
		if err != nil || len(got.Results) != 3 || got.Results[0].Node.Value != "va" ||
			len(got.Results[1].Children.Children) != 1 || !isCode(got.Results[2].Error, api.CodeNotFound) {
			t.Fatalf("ReadMany = %+v, %v", got, err)
		}
	}
	var opErr *api.TxnOpError
	if _, err := c.ReadMany(ctx, []api.ReadOp{{Path: "/ok"}, {Path: "bad"}}); !errors.As(err, &opErr) || opErr.Op != 1 {
		t.Fatalf("ReadMany with a bad path = %v, want read 1 refused", err)
	}
}
