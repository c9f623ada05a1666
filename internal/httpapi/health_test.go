package httpapi_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/crypto/bcrypt"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/testkit/testcerts"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestClusterHealthOverClientCertAuth: with TLS from a private CA on the
// client port, client certificates required, and auth enabled, a caller
// known by its client certificate alone sees every member reachable, the
// leader agreed, and each member's role in every shard. (Health asked each
// member's client port over plain HTTP with the caller's bearer token
// before, and showed every other member unreachable here.)
func TestClusterHealthOverClientCertAuth(t *testing.T) {
	ca := testcerts.NewCA(t, "latch client CA")
	c := testcluster.New(t, 3, testcluster.Options{Shards: 2, Auth: server.AuthConfig{PasswordCost: bcrypt.MinCost}, ClientTLS: &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{ca.Issue(t, "member", testcerts.Server, testcerts.Options{}).TLS(t)},
		ClientCAs:    ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
	}})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS12, RootCAs: ca.Pool(),
		Certificates: []tls.Certificate{ca.Issue(t, "alice", testcerts.Client, testcerts.Options{}).TLS(t)},
	}}}
	leader := c.WaitLeader(10 * time.Second)
	viewer := c.Others(leader)[0]
	for _, change := range []string{
		`{"action":"user_add","user":"root","password":"root-pw"}`,
		`{"action":"user_add","user":"alice","password":"alice-pw"}`,
		`{"action":"enable"}`,
	} {
		if status, body := call(t, client, "POST", c.URL(leader)+"/v1/auth", change); status != http.StatusOK {
			t.Fatalf("POST /v1/auth %s: status %d %s", change, status, body)
		}
	}

	var h api.ClusterHealth
	var status int
	healthy := testcluster.WaitFor(15*time.Second, func() bool {
		var body []byte
		status, body = call(t, client, "GET", c.URL(viewer)+"/v1/cluster/health", "")
		h = api.ClusterHealth{}
		return status == http.StatusOK && json.Unmarshal(body, &h) == nil && reachable(h) == 3 && h.LeaderID != ""
	})
	if !healthy {
		t.Fatalf("health over client-certificate auth never showed 3 reachable members with a leader: status %d %+v", status, h)
	}
	for _, m := range h.Members {
		if m.Error != "" || m.Role == "" || m.AppliedIndex == 0 || len(m.Shards) != 2 {
			t.Fatalf("member %+v: want no error, a role, an applied index and its role in both shards", m)
		}
		for shard, s := range m.Shards {
			if s.Shard != shard || s.Role == "" || s.Term == 0 {
				t.Fatalf("member %s shard %d: %+v; want its role and term in shard %d", m.Name, shard, s, shard)
			}
		}
	}
}

// call sends one request with client and returns the status and body.
func call(t *testing.T, client *http.Client, method, url, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, data
}

// TestReadyzNamesAFatalStop: a member that stopped on a fatal error (here
// a committed entry it cannot decode, as a member running another command
// format would propose) answers /readyz 503 saying so, in the words of the
// 503 its reads get, not as a member still catching up; /healthz stays 200.
func TestReadyzNamesAFatalStop(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	base := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if status, body := send(t, ctx, "GET", base+"/readyz", ""); status != http.StatusOK {
		t.Fatalf("/readyz before: %d %s", status, body)
	}
	n := c.Nodes[0]
	garbage := raftpb.Message{Type: raftpb.MsgProp, From: n.ID, To: n.ID,
		Entries: []raftpb.Entry{{Data: []byte{0xee, 0x01, 0x02, 0x03}}}}
	if err := n.Server.Process(ctx, 1, garbage); err != nil {
		t.Fatalf("the proposal was not taken: %v", err)
	}
	if !testcluster.WaitFor(10*time.Second, func() bool {
		select {
		case <-n.Server.Done():
			return true
		default:
			return false
		}
	}) {
		t.Fatal("the member did not stop at the undecodable entry")
	}
	const fatal = "this member stopped on a fatal error and serves nothing: "
	status, body := send(t, ctx, "GET", base+"/readyz", "")
	var e api.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil || status != http.StatusServiceUnavailable ||
		e.Error.Code != api.CodeUnavailable || !strings.HasPrefix(e.Error.Message, fatal) ||
		!strings.Contains(e.Error.Message, "does not decode") {
		t.Errorf("/readyz after the fatal stop: %d %s; want 503 %q and the reason", status, body, fatal+"...")
	}
	status, read := send(t, ctx, "GET", base+"/v1/kv/?consistency=stale", "")
	var readErr api.ErrorBody
	if err := json.Unmarshal(read, &readErr); err != nil || status != http.StatusServiceUnavailable || readErr.Error.Message != e.Error.Message {
		t.Errorf("a stale read after the fatal stop: %d %s; want the 503 /readyz gives (%s)", status, read, e.Error.Message)
	}
	if status, body := send(t, ctx, "GET", base+"/healthz", ""); status != http.StatusOK {
		t.Errorf("/healthz after the fatal stop: %d %s; want 200", status, body)
	}
}
