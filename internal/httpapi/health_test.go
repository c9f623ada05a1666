package httpapi_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

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
