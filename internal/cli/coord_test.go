package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/client"
)

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// running is a latchctl invocation in the background.
type running struct {
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan int
}

func startLatchctl(env map[string]string, args ...string) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stdout: &syncBuffer{}, stderr: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	stdio := IO{Stdin: strings.NewReader(""), Stdout: r.stdout, Stderr: r.stderr,
		Getenv: func(name string) string { return env[name] }}
	go func() { r.done <- Run(ctx, args, stdio) }()
	return r
}

func (r *running) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-r.done:
		return code
	case <-time.After(20 * time.Second):
		t.Fatalf("latchctl did not finish; stdout %q stderr %q", r.stdout, r.stderr)
	}
	return 0
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestLockCommand(t *testing.T) {
	t.Parallel()
	_, env := newCluster(t, 2)
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
	}{
		{"token in the environment", []string{"lock", "R", "--", "sh", "-c", "echo token=$" + EnvFencingToken}, ExitOK, "token="},
		{"exit code propagated", []string{"lock", "R", "--", "sh", "-c", "exit 7"}, 7, ""},
		{"election", []string{"elect", "db", "--value", "me", "--", "sh", "-c", "echo leader=$" + EnvFencingToken}, ExitOK, "leader="},
		{"no command", []string{"lock", "R"}, ExitHoldFailed, ""},
		{"missing dash", []string{"lock", "R", "true"}, ExitHoldFailed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := latchctl(t, env, "", tt.args...)
			if got.code != tt.code || !strings.Contains(got.stdout, tt.stdout) {
				t.Fatalf("latchctl %v = %+v, want exit %d and stdout ~%q", tt.args, got, tt.code, tt.stdout)
			}
			if tt.stdout != "" && strings.Contains(got.stdout, "=\n") {
				t.Fatalf("empty fencing token: %q", got.stdout)
			}
		})
	}
	// Each run released: the lock is free and the election has no leader.
	if got := latchctl(t, env, "", "lock-status", "R"); got.code != ExitOK || !strings.Contains(got.stdout, "free") {
		t.Fatalf("lock-status = %+v", got)
	}
	if got := latchctl(t, env, "", "election-status", "db"); got.code != ExitOK || !strings.Contains(got.stdout, "no leader") {
		t.Fatalf("election-status = %+v", got)
	}
}

// TestLockLostStopsCommand expires the holder's session while its command
// runs: the command is stopped and latchctl exits ExitLost.
func TestLockLostStopsCommand(t *testing.T) {
	t.Parallel()
	cluster, env := newCluster(t, 1)
	r := startLatchctl(env, "lock", "R", "--session-timeout", "2s", "--grace", "5s", "--",
		"sh", "-c", "trap 'echo terminated; exit 0' TERM; echo started; while :; do sleep 0.05; done")
	waitUntil(t, "the command to start", func() bool { return strings.Contains(r.stdout.String(), "started") })
	got := latchctl(t, env, "", "lock-status", "-o", "json", "R")
	var state struct {
		Holder struct {
			SessionHandle string `json:"session_handle"`
			FencingToken  uint64 `json:"fencing_token"`
		} `json:"holder"`
	}
	if err := json.Unmarshal([]byte(got.stdout), &state); err != nil || state.Holder.SessionHandle == "" {
		t.Fatalf("lock-status = %+v (%v)", got, err)
	}
	holder, ok := cluster.SessionByHandle(state.Holder.SessionHandle)
	if !ok {
		t.Fatalf("no live session has the holder's handle %s", state.Holder.SessionHandle)
	}
	cluster.Expire(holder)
	if code := r.wait(t); code != ExitLost {
		t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, ExitLost, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout.String(), "terminated") {
		t.Fatalf("the command was not sent SIGTERM: %q", r.stdout)
	}
}

func TestWatchCommand(t *testing.T) {
	t.Parallel()
	_, env := newCluster(t, 2)
	r := startLatchctl(env, "watch", "/app", "-r", "--persistent")
	waitUntil(t, "the watch", func() bool { return strings.Contains(r.stderr.String(), "watching /app") })
	for _, value := range []string{"1", "2"} {
		if got := latchctl(t, env, "", "put", "/app/x", value); got.code != ExitOK {
			t.Fatalf("put = %+v", got)
		}
	}
	waitUntil(t, "two CHANGED/CREATED events", func() bool {
		out := r.stdout.String()
		return strings.Contains(out, "CREATED /app/x version 1") && strings.Contains(out, "CHANGED /app/x version 2")
	})
	r.cancel()
	if code := r.wait(t); code != ExitOK {
		t.Fatalf("interrupted watch exit %d, stderr %q", code, r.stderr)
	}

	// One-shot, JSON.
	one := startLatchctl(env, "watch", "-o", "json", "/app/x")
	waitUntil(t, "the watch", func() bool { return strings.Contains(one.stderr.String(), "watching") })
	latchctl(t, env, "", "rm", "/app/x")
	if code := one.wait(t); code != ExitOK {
		t.Fatalf("one-shot watch exit %d, stderr %q", code, one.stderr)
	}
	var ev client.Event
	if err := json.Unmarshal([]byte(one.stdout.String()), &ev); err != nil || ev.Event.Event != "DELETED" {
		t.Fatalf("one-shot output %q (%v), want a DELETED event", one.stdout, err)
	}
}
