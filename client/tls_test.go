package client

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcerts"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// tlsCluster starts n in-process members serving https with a certificate
// from ca, requiring client certificates from ca.
func tlsCluster(t *testing.T, ca *testcerts.CA, n int) *testcluster.Cluster {
	t.Helper()
	opts := clusterOptions
	opts.ClientTLS = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{ca.Issue(t, "server", testcerts.Server, testcerts.Options{}).TLS(t)},
		ClientCAs:    ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
	}
	return testcluster.New(t, n, opts)
}

// tlsFiles writes ca and a client certificate for user as PEM files.
func tlsFiles(t *testing.T, ca *testcerts.CA, user string) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, user, testcerts.Client, testcerts.Options{}).Write(t, dir, user)
	return TLSFiles{CAFile: ca.WriteCA(t, dir, "ca.crt"), CertFile: certFile, KeyFile: keyFile}
}

// TestHTTPSKeepsTheScheme: a client given only a follower's https URL
// writes and reads over https; the cluster advertises every member's
// https URL (status, members), and a leader hint with https stays https in
// the client's endpoints.
func TestHTTPSKeepsTheScheme(t *testing.T) {
	ca := testcerts.NewCA(t, "latch CA")
	cluster := tlsCluster(t, ca, 3)
	leader := cluster.WaitLeader(10 * time.Second)
	follower := cluster.Others(leader)[0]
	cfg, err := LoadTLS(tlsFiles(t, ca, "alice"))
	if err != nil {
		t.Fatalf("LoadTLS: %v", err)
	}
	c, err := New(Config{Endpoints: []string{cluster.URL(follower)}, TLS: cfg, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/tls/k", "v"); err != nil {
		t.Fatalf("Put over https: %v", err)
	}
	node, err := c.Get(ctx, "/tls/k")
	if err != nil || node.Value != "v" {
		t.Fatalf("Get = %+v, %v; want v", node, err)
	}
	// Each member records its client URL in the member table once it runs.
	var status *api.Status
	waitFor(t, "the follower to name the leader's client URL", func() bool {
		status, err = c.StatusOf(ctx, cluster.URL(follower))
		return err == nil && status.LeaderClient != ""
	})
	if status.LeaderClient != cluster.URL(leader) {
		t.Fatalf("follower's status names leader client %q; want %s", status.LeaderClient, cluster.URL(leader))
	}
	waitFor(t, "every member's client URL in the table", func() bool {
		members, err := c.Members(ctx)
		if err != nil {
			return false
		}
		for _, m := range members.Members {
			if m.ClientURL == "" {
				return false
			}
		}
		return true
	})
	members, err := c.Members(ctx)
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	for _, m := range members.Members {
		if !strings.HasPrefix(m.ClientURL, "https://") {
			t.Errorf("member %s advertises %q; want https://", m.Name, m.ClientURL)
		}
	}
	c.endpoints.prefer(status.LeaderClient)
	if known := c.endpoints.list(); !containsString(known, cluster.URL(leader)) {
		t.Errorf("after the leader hint the endpoints are %q; want %s among them", known, cluster.URL(leader))
	}
	if _, err := c.Get(ctx, "/tls/k"); err != nil {
		t.Fatalf("Get through the hinted leader: %v", err)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestHTTPSRefusals: without the CA, with another CA's client certificate,
// or without a client certificate, requests fail with the TLS reason and
// write nothing.
func TestHTTPSRefusals(t *testing.T) {
	ca, other := testcerts.NewCA(t, "latch CA"), testcerts.NewCA(t, "other CA")
	cluster := tlsCluster(t, ca, 1)
	good := tlsFiles(t, ca, "alice")
	intruder := tlsFiles(t, other, "mallory")
	for name, tc := range map[string]struct {
		files TLSFiles
		want  string
	}{
		"server CA unknown":          {TLSFiles{CertFile: good.CertFile, KeyFile: good.KeyFile}, "certificate signed by unknown authority"},
		"client certificate missing": {TLSFiles{CAFile: good.CAFile}, "certificate required"},
		"client certificate of another CA": {TLSFiles{CAFile: good.CAFile, CertFile: intruder.CertFile, KeyFile: intruder.KeyFile},
			"certificate required"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadTLS(tc.files)
			if err != nil {
				t.Fatalf("LoadTLS: %v", err)
			}
			c, err := New(Config{Endpoints: []string{cluster.URL(0)}, TLS: cfg, MaxAttempts: 1, DialTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = c.Put(ctx, "/tls/"+strings.ReplaceAll(name, " ", "-"), "v")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Put = %v; want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := cluster.LocalGet(0, "/tls"); err == nil {
		t.Error("a refused client created /tls")
	}
}

func TestLoadTLSRefusesBadFiles(t *testing.T) {
	ca := testcerts.NewCA(t, "latch CA")
	good := tlsFiles(t, ca, "alice")
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, files := range map[string]TLSFiles{
		"cert without key": {CertFile: good.CertFile},
		"key without cert": {KeyFile: good.KeyFile},
		"missing CA":       {CAFile: filepath.Join(t.TempDir(), "absent.crt")},
		"CA without PEM":   {CAFile: garbage},
		"garbage cert":     {CertFile: garbage, KeyFile: good.KeyFile},
		"mismatched key":   {CertFile: good.CertFile, KeyFile: tlsFiles(t, ca, "bob").KeyFile},
	} {
		if _, err := LoadTLS(files); err == nil {
			t.Errorf("%s: LoadTLS(%+v) accepted", name, files)
		}
	}
}
