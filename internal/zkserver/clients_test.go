package zkserver

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests in this file drive real ZooKeeper clients from Debian's
// packages, which .ci/run installs: zkCli.sh (package zookeeper, with a
// JRE) and kazoo (package python3-kazoo). They skip, saying so, only where
// a package is absent locally.

const (
	zkCliPath = "/usr/share/zookeeper/bin/zkCli.sh"
	python    = "/usr/bin/python3"
)

func requireZkCli(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(zkCliPath); err != nil {
		t.Skipf("zkCli.sh absent (%v): install Debian's zookeeper package (.ci/run does)", err)
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skipf("java absent: install default-jre-headless (.ci/run does)")
	}
}

func requireKazoo(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import kazoo").Run(); err != nil {
		t.Skipf("kazoo absent (%v): install Debian's python3-kazoo (.ci/run does)", err)
	}
}

// output collects a process's output and wakes waiters on every write.
type output struct {
	mu   sync.Mutex
	cond *sync.Cond
	buf  bytes.Buffer
	done bool
}

func newOutput() *output {
	o := &output{}
	o.cond = sync.NewCond(&o.mu)
	return o
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	o.cond.Broadcast()
	return len(p), nil
}

func (o *output) finish() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done = true
	o.cond.Broadcast()
}

// waitFor waits until the output after offset from holds want, and
// returns the offset just past it.
func (o *output) waitFor(t *testing.T, from int, want string, timeout time.Duration) int {
	t.Helper()
	timer := time.AfterFunc(timeout, func() { o.mu.Lock(); o.done = true; o.cond.Broadcast(); o.mu.Unlock() })
	defer timer.Stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	for {
		if i := strings.Index(o.buf.String()[from:], want); i >= 0 {
			return from + i + len(want)
		}
		if o.done {
			t.Fatalf("output lacks %q after offset %d:\n%s", want, from, o.buf.String())
		}
		o.cond.Wait()
	}
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// startZkCli runs zkCli.sh against addr for at most two minutes, ended at
// the test's end (its output logged if the test failed), and returns its
// stdin and output.
func startZkCli(t *testing.T, addr string) (io.WriteCloser, *output) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, zkCliPath, "-server", addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	out := newOutput()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); out.finish(); close(exited) }()
	t.Cleanup(func() {
		stdin.Close()
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("zkCli output:\n%s", out.String())
		}
	})
	return stdin, out
}

// TestZkCliSession: a scripted zkCli.sh session, each command sent once
// the previous one answered: create (-e, -s, -c), ls -s, get -s, set -v,
// stat, addWatch, sync, delete, deleteall (multi batches).
func TestZkCliSession(t *testing.T) {
	requireZkCli(t)
	c := startZK(t, 1, Config{})
	stdin, out := startZkCli(t, c.addrs[0])
	at := out.waitFor(t, 0, "type:None path:null", time.Minute) // connected
	steps := []struct{ command, want string }{
		{"create /cli hello", "Created /cli"},
		{"create -e /cli/eph e", "Created /cli/eph"},
		{"create -s /cli/seq- s", "Created /cli/seq-"},
		{"create -c /cli/cont", "Created /cli/cont"},
		{"ls -s /cli", "numChildren = 3"},
		{"get -s /cli", "dataVersion = 0"},
		{"set -v 0 /cli world", ""},
		{"set -v 0 /cli again", "version No is not valid : /cli"},
		{"stat /cli", "dataVersion = 1"},
		{"get /cli", "world"},
		{"addWatch -m PERSISTENT_RECURSIVE /cli", ""},
		{"create /cli/w x", "type:NodeCreated path:/cli/w"},
		{"sync /cli", "Sync is OK"},
		{"delete /cli/eph", ""},
		{"ls /cli", "[cont, seq-"}, // eph is gone: it would sort between them
		{"get /nope", "Node does not exist: /nope"},
	}
	for _, step := range steps {
		if _, err := io.WriteString(stdin, step.command+"\n"); err != nil {
			t.Fatalf("%s: %v", step.command, err)
		}
		// Each command is followed by a marker whose answer shows it ran.
		if step.want != "" {
			at = out.waitFor(t, at, step.want, 30*time.Second)
		}
		if _, err := io.WriteString(stdin, "ls /\n"); err != nil {
			t.Fatal(err)
		}
		at = out.waitFor(t, at, "[cli]", 30*time.Second)
	}
	// deleteall deletes the subtree in multi batches.
	if _, err := io.WriteString(stdin, "deleteall /cli\nstat /cli\n"); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, at, "Node does not exist: /cli", 30*time.Second)
	_, _ = io.WriteString(stdin, "quit\n")
}

// TestKazooRecipes: kazoo's Lock, Election, Barrier, Counter, Queue,
// Party, ChildrenWatch and DataWatch recipes, transactions (committed,
// refused with ZooKeeper's per-operation results) and Stat's times and
// child version (equal through both clients, within the script's clock
// window), two clients on two members.
func TestKazooRecipes(t *testing.T) {
	requireKazoo(t)
	c := startZK(t, 3, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "testdata/kazoo_recipes.py", strings.Join(c.addrs[:2], ",")).CombinedOutput()
	t.Logf("kazoo:\n%s", out)
	if err != nil {
		t.Fatalf("kazoo recipes: %v", err)
	}
	for _, recipe := range []string{"lock", "election", "barrier", "counter", "queue", "party", "watches", "transaction", "stat"} {
		if !strings.Contains(string(out), "ok "+recipe+"\n") {
			t.Fatalf("recipe %s did not report ok", recipe)
		}
	}
}
