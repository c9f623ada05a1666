package recipes_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/testkit/proccluster"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// startCluster starts a 3-node loopback cluster and waits for its leader.
func startCluster(t *testing.T) *proccluster.Cluster {
	t.Helper()
	cluster := proccluster.Start(t, proccluster.Options{Nodes: 3})
	cluster.WaitLeader(20 * time.Second)
	return cluster
}

// newClient returns a client of every member, closed at cleanup. Notify
// jitter is off: these tests measure hand-offs, not fleets.
func newClient(t *testing.T, endpoints []string, transport http.RoundTripper) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: endpoints, NotifyJitter: -1, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newSession returns a session of c, closed at cleanup when still open.
func newSession(t *testing.T, c *client.Client, timeout time.Duration) *client.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// group is a process started in a process group of its own (latchctl),
// together with the children it starts, which inherit the group.
type group struct {
	name   string
	cmd    *exec.Cmd
	pgid   int
	output *lockedBuffer
	exited chan struct{} // closed when the leader process was reaped
	err    error         // its exit; set before exited closes
}

// startGroup runs argv in a new process group with extra environment,
// collecting its output. Cleanup SIGKILLs the whole group (latchctl and
// its child) and reaps it.
func startGroup(t *testing.T, name string, env []string, argv ...string) *group {
	t.Helper()
	g := &group{name: name, output: &lockedBuffer{}, exited: make(chan struct{})}
	g.cmd = exec.Command(argv[0], argv[1:]...)
	g.cmd.Env = append(os.Environ(), env...)
	g.cmd.Stdout, g.cmd.Stderr = g.output, g.output
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	g.pgid = g.cmd.Process.Pid
	go func() {
		g.err = g.cmd.Wait()
		close(g.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
		<-g.exited
		if t.Failed() {
			t.Logf("output of %s:\n%s", g.name, g.output.String())
		}
	})
	return g
}

// signal sends sig to every process of the group (latchctl and its child).
func (g *group) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(-g.pgid, sig); err != nil {
		t.Fatalf("signal %v to group %d (%s): %v", sig, g.pgid, g.name, err)
	}
}

// waitExit waits for the group's leader process to exit and returns its
// exit code; it fails the test on timeout.
func (g *group) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-g.exited:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v; output:\n%s", g.name, timeout, g.output.String())
	}
	var exit *exec.ExitError
	if errors.As(g.err, &exit) {
		return exit.ExitCode()
	}
	return 0
}

// writerEnvironment is what a latchctl-run writer needs to find the
// resource, name itself and find its orders (a file path, or "" for none).
func writerEnvironment(name, url, orders string) []string {
	return []string{helperEnv + "=writer", writerEnv + "=" + name, resourceEnv + "=" + url, ordersEnv + "=" + orders}
}

// self returns the test binary, which runs the writer under helperEnv.
func self(t *testing.T) string {
	t.Helper()
	path, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// lockedBuffer is an output buffer safe for a process and the test.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitUntil waits until cond holds, failing the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !testcluster.WaitFor(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// endpointsFlag is the --endpoints value of a cluster.
func endpointsFlag(cluster *proccluster.Cluster) string {
	return strings.Join(cluster.URLs(), ",")
}
