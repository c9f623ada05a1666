package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/buildinfo"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// realCluster starts n real servers in-process and returns the environment
// that points latchctl at them.
func realCluster(t *testing.T, n int) (*testcluster.Cluster, map[string]string) {
	t.Helper()
	c := testcluster.New(t, n, testcluster.Options{})
	return c, map[string]string{EnvEndpoints: strings.Join(c.URLs(), ",")}
}

// TestEphemeralNeedsSession checks that 'put --ephemeral' without --session
// is a usage error naming the flags (not the Go API's WithSession) that
// writes nothing.
func TestEphemeralNeedsSession(t *testing.T) {
	_, env := realCluster(t, 1)
	got := latchctl(t, env, "", "put", "--ephemeral", "/e", "x")
	if got.code != ExitOther || !strings.Contains(got.stderr, "latchctl: --ephemeral needs --session ID") || strings.Contains(got.stderr, "WithSession") {
		t.Fatalf("put --ephemeral without --session = %+v", got)
	}
	if got := latchctl(t, env, "", "get", "/e"); got.code != ExitNotFound {
		t.Fatalf("the refused put wrote /e: %+v", got)
	}
}

// TestStatusNamesTheLeader checks that every row of 'latchctl status' shows
// the leader by member name and client URL, not by raft id.
func TestStatusNamesTheLeader(t *testing.T) {
	c, env := realCluster(t, 3)
	leader := c.Nodes[c.WaitLeader(10*time.Second)]
	var got result
	var rows []endpointStatus
	ok := testcluster.WaitFor(10*time.Second, func() bool {
		got = latchctl(t, env, "", "status", "-o", "json")
		rows = nil
		if got.code != ExitOK || json.Unmarshal([]byte(got.stdout), &rows) != nil || len(rows) != 3 {
			return false
		}
		for _, row := range rows {
			if row.LeaderName != leader.Name || row.Status.LeaderClient != leader.URL {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("status -o json never named leader %s (%s) on every row: %+v", leader.Name, leader.URL, got)
	}
	text := latchctl(t, env, "", "status")
	lines := strings.Split(strings.TrimSpace(text.stdout), "\n")
	if text.code != ExitOK || len(lines) != 4 || !strings.Contains(lines[0], "LEADER  LEADER URL") {
		t.Fatalf("status = %+v", text)
	}
	for _, line := range lines[1:] {
		if fields := strings.Fields(line); len(fields) < 8 || fields[4] != leader.Name || fields[5] != leader.URL {
			t.Errorf("status row %q does not show leader %s at %s", line, leader.Name, leader.URL)
		}
	}
}

// TestSessionClose checks 'latchctl session close ID': the session's
// ephemeral nodes go at once, and closing a gone session is exit 2.
func TestSessionClose(t *testing.T) {
	_, env := realCluster(t, 3)
	created := latchctl(t, env, "", "session", "create", "--timeout", "30s")
	id := strings.TrimSpace(created.stdout)
	if created.code != ExitOK || id == "" {
		t.Fatalf("session create = %+v", created)
	}
	if got := latchctl(t, env, "", "put", "--ephemeral", "--session", id, "/members/a", "x"); got.code != ExitOK {
		t.Fatalf("ephemeral put = %+v", got)
	}
	tests := []struct {
		name   string
		id     string
		code   int
		stdout string
		stderr string
	}{
		{"open session", id, ExitOK, "closed session " + id, ""},
		{"already closed", id, ExitNotFound, "", "latchctl: "},
		{"never existed", "0x00000000deadbeef", ExitNotFound, "", "latchctl: "},
		{"malformed id", "not-an-id", ExitOther, "", string(api.CodeInvalidArgument)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := latchctl(t, env, "", "session", "close", tt.id)
			if got.code != tt.code || !strings.Contains(got.stdout, tt.stdout) || !strings.Contains(got.stderr, tt.stderr) {
				t.Fatalf("session close %s = %+v, want exit %d, stdout ~%q, stderr ~%q", tt.id, got, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
	if got := latchctl(t, env, "", "get", "/members/a"); got.code != ExitNotFound {
		t.Fatalf("the closed session's ephemeral node is still there: %+v", got)
	}
}

// TestRunnerExitCodes checks that 'lock' and 'elect' pass their command's
// exit code through, 2 included, and report their own failures with 125,
// 126 and 127, which latchctl's ordinary codes (1-4) never collide with.
func TestRunnerExitCodes(t *testing.T) {
	_, env := realCluster(t, 3)
	notExecutable := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unreachable := map[string]string{EnvEndpoints: "http://127.0.0.1:1"}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
	}{
		{"command succeeds", env, []string{"lock", "R", "--", "true"}, ExitOK},
		{"command exits 2", env, []string{"lock", "R", "--", "sh", "-c", "exit 2"}, 2},
		{"command exits 4", env, []string{"elect", "db", "--", "sh", "-c", "exit 4"}, 4},
		{"command killed by a signal", env, []string{"lock", "R", "--", "sh", "-c", "kill -KILL $$"}, 128 + 9},
		{"command not found", env, []string{"lock", "R", "--", "latch-no-such-command"}, ExitCommandAbsent},
		{"command path not found", env, []string{"elect", "db", "--", "/nonexistent/latch-cmd"}, ExitCommandAbsent},
		{"command not executable", env, []string{"lock", "R", "--", notExecutable}, ExitCannotRun},
		{"missing dash", env, []string{"lock", "R", "true"}, ExitHoldFailed},
		{"no command", env, []string{"elect", "db"}, ExitHoldFailed},
		{"unknown flag", env, []string{"lock", "--bogus", "R", "--", "true"}, ExitHoldFailed},
		{"cluster unreachable", unreachable, []string{"lock", "R", "--command-timeout", "1s", "--", "true"}, ExitHoldFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := latchctl(t, tt.env, "", tt.args...); got.code != tt.code {
				t.Fatalf("latchctl %q = %+v, want exit %d", tt.args, got, tt.code)
			}
		})
	}
	if got := latchctl(t, env, "", "lock-status", "R"); got.code != ExitOK || !strings.Contains(got.stdout, "free") {
		t.Fatalf("a run left lock R held: %+v", got)
	}
}

// TestRunnerOwnOutcomes checks the codes of what happens to latchctl
// itself around the command: its session closed while it waits for the
// lock (125, where it used to exit 2 like a command's "not found") and the
// lock lost while the command runs (124, the command stopped).
func TestRunnerOwnOutcomes(t *testing.T) {
	cluster, env := realCluster(t, 3)
	holder := startLatchctl(env, "lock", "R", "--grace", "5s", "--",
		"sh", "-c", "trap 'echo terminated; exit 0' TERM; echo started; while :; do sleep 0.05; done")
	waitUntil(t, "the holder's command to start", func() bool { return strings.Contains(holder.stdout.String(), "started") })
	waiter := startLatchctl(env, "lock", "R", "--", "true")
	var queue []string
	waitUntil(t, "the waiter to queue", func() bool {
		queue = strings.Fields(latchctl(t, env, "", "ls", "/locks/R").stdout)
		return len(queue) == 2
	})

	closeSession := func(path string) {
		t.Helper()
		var node api.Node
		got := latchctl(t, env, "", "get", "-o", "json", path)
		if err := json.Unmarshal([]byte(got.stdout), &node); err != nil || node.OwnerHandle == "" {
			t.Fatalf("get %s = %+v (%v)", path, got, err)
		}
		// A read names the owner by handle only; the test finds the id
		// in a replica's state, as no client can.
		var id string
		waitUntil(t, "the owner's session on node 0", func() bool {
			var ok bool
			id, ok = cluster.SessionByHandle(0, node.OwnerHandle)
			return ok
		})
		if got := latchctl(t, env, "", "session", "close", id); got.code != ExitOK {
			t.Fatalf("session close = %+v", got)
		}
	}
	closeSession("/locks/R/" + queue[1])
	if code := waiter.wait(t); code != ExitHoldFailed {
		t.Fatalf("waiter whose session closed: exit %d, want %d; stderr %q", code, ExitHoldFailed, waiter.stderr)
	}
	closeSession("/locks/R/" + queue[0])
	if code := holder.wait(t); code != ExitLost {
		t.Fatalf("holder whose session closed: exit %d, want %d; stderr %q", code, ExitLost, holder.stderr)
	}
	if !strings.Contains(holder.stdout.String(), "terminated") {
		t.Fatalf("the holder's command was not sent SIGTERM: %q", holder.stdout)
	}
}

// TestHelpAndVersion checks that 'latchctl --help' documents the exit codes
// and that 'latchctl version' and '--version' print the build.
func TestHelpAndVersion(t *testing.T) {
	help := latchctl(t, nil, "", "--help")
	for _, want := range []string{"Exit codes:", "  2    not found", "  124  the lock or leadership was lost", "  125  latchctl failed", "  127  the command was not found"} {
		if help.code != ExitOK || !strings.Contains(help.stdout, want) {
			t.Errorf("latchctl --help lacks %q: %+v", want, help)
		}
	}
	if sub := latchctl(t, nil, "", "get", "--help"); strings.Contains(sub.stdout, "Exit codes:") {
		t.Errorf("the exit codes repeat in every command's help: %q", sub.stdout)
	}
	want := buildinfo.Read("latchctl").String()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		got := latchctl(t, nil, "", args...)
		if got.code != ExitOK || got.stdout != want+"\n" || !strings.HasSuffix(want, ") "+runtime.Version()) {
			t.Errorf("latchctl %v = %+v, want %q", args, got, want)
		}
	}
	var info buildinfo.Info
	got := latchctl(t, nil, "", "version", "-o", "json")
	if err := json.Unmarshal([]byte(got.stdout), &info); err != nil || info.Program != "latchctl" || info.Version == "" || info.Revision == "" {
		t.Errorf("version -o json = %+v (%v)", got, err)
	}
}

// TestUsageErrorsPrintOnce checks that a bad command line is reported once,
// on one line with a pointer to help, not around a usage text.
func TestUsageErrorsPrintOnce(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"unknown flag", []string{"get", "--bogus", "/x"}, ExitOther, "latchctl: unknown flag: --bogus\nrun 'latchctl help' for usage\n"},
		{"bad flag value", []string{"--dial-timeout", "soon", "ls"}, ExitOther,
			"latchctl: invalid argument \"soon\" for \"--dial-timeout\" flag: time: invalid duration \"soon\"\nrun 'latchctl help' for usage\n"},
		{"missing argument", []string{"session", "close"}, ExitOther, "latchctl: accepts 1 arg(s), received 0\nrun 'latchctl help' for usage\n"},
		{"under lock", []string{"lock", "--bogus", "R", "--", "true"}, ExitHoldFailed, "latchctl: unknown flag: --bogus\nrun 'latchctl help' for usage\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := latchctl(t, nil, "", tt.args...)
			if got.code != tt.code || got.stdout != "" || got.stderr != tt.stderr {
				t.Fatalf("latchctl %q = %+v, want exit %d and only stderr %q", tt.args, got, tt.code, tt.stderr)
			}
		})
	}
}
