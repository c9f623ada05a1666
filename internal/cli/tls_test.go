package cli

import (
	"crypto/tls"
	"encoding/json"
	"strings"
	"testing"

	"github.com/latch-io/latch/internal/loadgen"
	"github.com/latch-io/latch/internal/testkit/testcerts"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestTLSFlags: --cacert, --cert and --key reach an https cluster that
// requires client certificates, for ordinary commands and bench; without
// them the TLS refusal is reported; bad files are a usage error.
func TestTLSFlags(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "latch CA")
	cluster := testcluster.New(t, 1, testcluster.Options{ClientTLS: &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{ca.Issue(t, "server", testcerts.Server, testcerts.Options{}).TLS(t)},
		ClientCAs:    ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
	}})
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, "alice", testcerts.Client, testcerts.Options{}).Write(t, dir, "alice")
	caFile := ca.WriteCA(t, dir, "ca.crt")
	env := map[string]string{EnvEndpoints: cluster.URL(0)}
	// A TLS handshake under the race detector on a loaded machine can take
	// longer than the default 2s.
	secured := []string{"--dial-timeout", "10s", "--cacert", caFile, "--cert", certFile, "--key", keyFile}

	if got := latchctl(t, env, "", append(secured, "put", "/tls/k", "v")...); got.code != ExitOK {
		t.Fatalf("put over https = %+v", got)
	}
	if got := latchctl(t, env, "", append(secured, "get", "/tls/k")...); got.code != ExitOK || got.stdout != "v\n" {
		t.Fatalf("get over https = %+v", got)
	}
	bench := latchctl(t, env, "", append(secured, "bench", "-o", "json", "--duration", "200ms", "--clients", "2", "--op", "put")...)
	var r loadgen.BenchResult
	if bench.code != ExitOK || json.Unmarshal([]byte(bench.stdout), &r) != nil || r.Ops == 0 || r.Errors != 0 {
		t.Fatalf("bench over https = %+v", bench)
	}
	if got := latchctl(t, env, "", "--dial-timeout", "10s", "--cacert", caFile, "get", "/tls/k"); got.code != ExitUnavailable || !strings.Contains(got.stderr, "certificate required") {
		t.Fatalf("get without a client certificate = %+v; want exit %d naming the missing certificate", got, ExitUnavailable)
	}
	if got := latchctl(t, env, "", "--cert", certFile, "get", "/tls/k"); got.code != ExitOther || !strings.Contains(got.stderr, "--cacert, --cert, --key") {
		t.Fatalf("--cert without --key = %+v; want a usage error", got)
	}
}
