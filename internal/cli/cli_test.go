package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/loadgen"
	"github.com/latch-io/latch/internal/testkit/faulthttp"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// result is what one latchctl invocation produced.
type result struct {
	stdout, stderr string
	code           int
}

// latchctl runs the CLI in-process with env as its environment.
func latchctl(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	stdio := IO{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		Getenv: func(name string) string { return env[name] }}
	code := Run(context.Background(), args, stdio)
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// newCluster starts n real members behind fault-injecting proxies, whose
// URLs the returned environment names. Sessions last at least 2s (the
// members' default), so a loaded machine does not expire them by accident.
func newCluster(t *testing.T, n int) (*faulthttp.Cluster, map[string]string) {
	t.Helper()
	cluster := faulthttp.NewCluster(t, n, testcluster.Options{})
	return cluster, map[string]string{EnvEndpoints: strings.Join(cluster.URLs(), ",")}
}

func TestCommands(t *testing.T) {
	t.Parallel()
	cluster, env := newCluster(t, 2)
	tests := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string // substring expected on stdout
		stderr string // substring expected on stderr
	}{
		{"put", "", []string{"put", "/app/config", "v1"}, ExitOK, "/app/config version 1", ""},
		{"put from stdin", "from-stdin", []string{"put", "/app/other"}, ExitOK, "/app/other version 1", ""},
		{"get", "", []string{"get", "/app/config"}, ExitOK, "v1\n", ""},
		{"get stale", "", []string{"get", "--consistency", "stale", "/app/other"}, ExitOK, "from-stdin", ""},
		{"get json", "", []string{"get", "-o", "json", "/app/config"}, ExitOK, `"version": 1`, ""},
		{"CAS on the right version", "", []string{"put", "--prev-version", "1", "/app/config", "v2"}, ExitOK, "version 2", ""},
		{"CAS on a wrong version", "", []string{"put", "--prev-version", "1", "/app/config", "v3"}, ExitPrecondition, "", "precondition_failed"},
		{"create only", "", []string{"put", "--prev-version", "none", "/app/config", "v3"}, ExitPrecondition, "", "precondition_failed"},
		// The suffix of a sequential create whose parent it makes is the
		// index of that create (checkSequentialName).
		{"sequential", "", []string{"put", "--sequential", "/q/item-", "x"}, ExitOK, "/q/item-", ""},
		{"ls", "", []string{"ls", "/app"}, ExitOK, "config\nother\n", ""},
		{"ls root", "", []string{"ls"}, ExitOK, "app\nq\n", ""},
		{"rm a parent", "", []string{"rm", "/app"}, ExitPrecondition, "", `node "/app" has 2 children`},
		{"rm -r", "", []string{"rm", "-r", "/app"}, ExitOK, "deleted /app", ""},
		{"get missing", "", []string{"get", "/app/config"}, ExitNotFound, "", "not_found"},
		{"bad path", "", []string{"get", "relative"}, ExitOther, "", "not absolute"},
		{"missing argument", "", []string{"get"}, ExitOther, "", "usage"},
		{"unknown command", "", []string{"frobnicate"}, ExitOther, "", "unknown command"},
		{"bad output format", "", []string{"-o", "yaml", "ls"}, ExitOther, "", "want text or json"},
		{"bad consistency", "", []string{"get", "--consistency", "eventual", "/x"}, ExitOther, "", "want linearizable or stale"},
		{"ephemeral without session", "", []string{"put", "--ephemeral", "/e", "x"}, ExitOther, "", "--ephemeral needs --session"},
		{"status", "", []string{"status"}, ExitOK, "leader", ""},
		{"members", "", []string{"members"}, ExitOK, "n2", ""},
		{"session get missing", "", []string{"session", "get", "0xdead"}, ExitNotFound, "", "session_expired"},
		{"keepalive of a gone session", "", []string{"session", "keepalive", "--once", "0xdead"}, ExitNotFound, "", "session_expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := latchctl(t, env, tt.stdin, tt.args...)
			if got.code != tt.code || !strings.Contains(got.stdout, tt.stdout) || !strings.Contains(got.stderr, tt.stderr) {
				t.Fatalf("latchctl %v = exit %d, stdout %q, stderr %q; want exit %d, stdout ~%q, stderr ~%q",
					tt.args, got.code, got.stdout, got.stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
	_ = cluster
	checkSequentialName(t, env)
}

// checkSequentialName reads back the node TestCommands made with put
// --sequential /q/item-: a parent made by the create counts from the
// create's own index, so the suffix is the node's created_index.
func checkSequentialName(t *testing.T, env map[string]string) {
	t.Helper()
	listed := latchctl(t, env, "", "ls", "/q")
	name := strings.TrimSpace(listed.stdout)
	got := latchctl(t, env, "", "get", "-o", "json", "/q/"+name)
	var node api.Node
	if listed.code != ExitOK || got.code != ExitOK || json.Unmarshal([]byte(got.stdout), &node) != nil {
		t.Fatalf("ls /q = %+v; get = %+v", listed, got)
	}
	if want := fmt.Sprintf("item-%010d", node.CreatedIndex); name != want {
		t.Fatalf("sequential create made %s, want %s (its created_index)", name, want)
	}
}

func TestSessionCommands(t *testing.T) {
	t.Parallel()
	cluster, env := newCluster(t, 1)
	created := latchctl(t, env, "", "session", "create", "--timeout", "3s", "-o", "json")
	var session struct {
		SessionID string `json:"session_id"`
		TimeoutMs int64  `json:"timeout_ms"`
	}
	if created.code != ExitOK || json.Unmarshal([]byte(created.stdout), &session) != nil || session.TimeoutMs != 3000 {
		t.Fatalf("session create = %+v", created)
	}
	if got := latchctl(t, env, "", "put", "--ephemeral", "--session", session.SessionID, "/members/a", "x"); got.code != ExitOK {
		t.Fatalf("ephemeral put = %+v", got)
	}
	if got := latchctl(t, env, "", "session", "get", session.SessionID); got.code != ExitOK || !strings.Contains(got.stdout, "1 ephemeral nodes") {
		t.Fatalf("session get = %+v", got)
	}
	if got := latchctl(t, env, "", "session", "keepalive", "--once", session.SessionID); got.code != ExitOK || cluster.Heartbeats(session.SessionID) != 1 {
		t.Fatalf("keepalive --once = %+v, heartbeats %d", got, cluster.Heartbeats(session.SessionID))
	}

	// A running keepalive ends with exit 2 when the session expires.
	done := make(chan result, 1)
	go func() { done <- latchctl(t, env, "", "session", "keepalive", session.SessionID) }()
	deadline := time.Now().Add(10 * time.Second)
	for cluster.Heartbeats(session.SessionID) < 2 { // --once's and the first of the keepalive's
		if time.Now().After(deadline) {
			t.Fatal("keepalive never looked the session up")
		}
		time.Sleep(time.Millisecond)
	}
	cluster.Expire(session.SessionID)
	select {
	case got := <-done:
		if got.code != ExitNotFound || !strings.Contains(got.stderr, "session_expired") {
			t.Fatalf("keepalive after expiry = %+v", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("keepalive did not notice the expiry")
	}
	if got := latchctl(t, env, "", "get", "/members/a"); got.code != ExitNotFound {
		t.Fatalf("the ephemeral node outlived its session: %+v", got)
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	cluster, env := newCluster(t, 2)
	cluster.Close()
	for _, args := range [][]string{{"get", "/x"}, {"status"}} {
		got := latchctl(t, env, "", append(args, "--command-timeout", "3s")...)
		if got.code != ExitUnavailable {
			t.Fatalf("latchctl %v with no server = %+v, want exit %d", args, got, ExitUnavailable)
		}
	}
	// The flag wins over the environment.
	live, _ := newCluster(t, 1)
	if got := latchctl(t, env, "", "--endpoints", live.URLs()[0], "ls"); got.code != ExitOK {
		t.Fatalf("--endpoints did not override %s: %+v", EnvEndpoints, got)
	}
}

func TestBench(t *testing.T) {
	t.Parallel()
	_, env := newCluster(t, 2)
	tests := []struct {
		name string
		args []string
	}{
		{"put", []string{"--op", "put", "--clients", "4"}},
		{"linearizable get", []string{"--op", "get", "--clients", "3", "--keys", "20"}},
		{"stale get", []string{"--op", "get", "--consistency", "stale", "--clients", "3", "--keys", "20"}},
		{"mixed", []string{"--op", "mixed", "--read-fraction", "0.5", "--clients", "4", "--keys", "10"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"bench", "-o", "json", "--duration", "300ms", "--value-size", "64"}, tt.args...)
			got := latchctl(t, env, "", args...)
			var r loadgen.BenchResult
			if got.code != ExitOK || json.Unmarshal([]byte(got.stdout), &r) != nil {
				t.Fatalf("bench = %+v", got)
			}
			if r.Ops == 0 || r.Errors != 0 || r.OpsPerSecond <= 0 || r.Latency.P50 <= 0 ||
				r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.P999 || r.Latency.P999 > r.Latency.Max {
				t.Fatalf("implausible report: %+v", r)
			}
			if tt.name == "mixed" && (r.Reads == nil || r.Writes == nil || r.Reads.Ops+r.Writes.Ops != r.Ops || r.Reads.Ops == 0 || r.Writes.Ops == 0) {
				t.Fatalf("mixed report without both kinds: %+v", r)
			}
		})
	}
	text := latchctl(t, env, "", "bench", "--duration", "100ms", "--clients", "2")
	if text.code != ExitOK || !strings.Contains(text.stdout, "ops/s") || !strings.Contains(text.stdout, "p99.9") {
		t.Fatalf("text report = %+v", text)
	}
	if got := latchctl(t, env, "", "bench", "--op", "cas"); got.code != ExitOther {
		t.Fatalf("bench --op cas = %+v, want usage error", got)
	}
}

func TestBenchCountsErrors(t *testing.T) {
	t.Parallel()
	cluster, env := newCluster(t, 1)
	cluster.Proxy(0).FailNext(5, api.CodePreconditionFailed, "")
	// The proxy answers the first five requests at once; the run must be
	// long enough to send them even on a loaded machine (under -race a
	// put can take tens of milliseconds), so 2s rather than a few hundred ms.
	got := latchctl(t, env, "", "bench", "-o", "json", "--duration", "2s", "--clients", "1")
	var r loadgen.BenchResult
	if got.code != ExitOK || json.Unmarshal([]byte(got.stdout), &r) != nil {
		t.Fatalf("bench = %+v", got)
	}
	if r.Errors != 5 || r.ErrorsByCode[string(api.CodePreconditionFailed)] != 5 {
		t.Fatalf("errors = %d %v, want 5 precondition_failed", r.Errors, r.ErrorsByCode)
	}
}
