package zkserver

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

func TestMain(m *testing.M) { proccluster.RunTests(m) }

// zkAddrs lists the members' ZooKeeper addresses, skipping except.
func zkAddrs(c *proccluster.Cluster, except int) []string {
	var out []string
	for i, m := range c.Members {
		if i != except {
			out = append(out, m.ZKAddr)
		}
	}
	return out
}

// waitSession waits on a client's event channel for a session, and
// returns it (failing the test on expiry or timeout).
func waitSession(t *testing.T, conn *zk.Conn, events <-chan zk.Event, what string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			switch ev.State {
			case zk.StateHasSession:
				return
			case zk.StateExpired:
				t.Fatalf("%s: session expired", what)
			}
		case <-deadline:
			t.Fatalf("%s: no session within 30s (state %v)", what, conn.State())
		}
	}
}

// TestKillMemberClientKeepsSession: a client holding a go-zookeeper Lock,
// an ephemeral node and watches on one member keeps them all when that
// member is killed with SIGKILL: it reconnects to another member with the
// same session (its password checked there), its watches are set again,
// the lock is still its own, and a waiter gets the lock only after it
// unlocks.
func TestKillMemberClientKeepsSession(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real latchd processes")
	}
	c := proccluster.Start(t, proccluster.Options{Nodes: 3, ZK: true})
	c.WaitLeader(30 * time.Second)

	holder, holderEvents, err := zk.Connect(zkAddrs(c, -1), 8*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waitSession(t, holder, holderEvents, "holder")
	session := holder.SessionID()
	victim := -1
	for i, m := range c.Members {
		if m.ZKAddr == holder.Server() {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("holder connected to %q, not a member", holder.Server())
	}

	lock := zk.NewLock(holder, "/svc/lock", openACL)
	if err := lock.Lock(); err != nil {
		t.Fatalf("holder lock: %v", err)
	}
	if _, err := holder.Create("/svc/eph", []byte("alive"), zk.FlagEphemeral, openACL); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Create("/svc/data", []byte("0"), 0, openACL); err != nil {
		t.Fatal(err)
	}
	_, _, dataWatch, err := holder.GetW("/svc/data")
	if err != nil {
		t.Fatal(err)
	}

	waiter, waiterEvents, err := zk.Connect(zkAddrs(c, victim), 8*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	waitSession(t, waiter, waiterEvents, "waiter")
	var holderReleased, waiterGot atomic.Bool
	waiterDone := make(chan error, 1)
	go func() {
		err := zk.NewLock(waiter, "/svc/lock", openACL).Lock()
		if err == nil {
			waiterGot.Store(true)
			if !holderReleased.Load() {
				err = errOverlap
			}
		}
		waiterDone <- err
	}()

	c.Kill(victim)
	waitSession(t, holder, holderEvents, "holder after the kill")
	if holder.SessionID() != session {
		t.Fatalf("holder's session changed from %#x to %#x", session, holder.SessionID())
	}
	if holder.Server() == c.Members[victim].ZKAddr {
		t.Fatalf("holder reconnected to the killed member")
	}
	if waiterGot.Load() {
		t.Fatal("the waiter got the lock while the holder's session lives")
	}
	ok, stat, err := waiter.Exists("/svc/eph")
	if err != nil || !ok || stat.EphemeralOwner == 0 {
		t.Fatalf("holder's ephemeral after the kill: exists=%v %+v %v", ok, stat, err)
	}
	// The data watch set on the killed member was set again on the new one.
	if _, err := waiter.Set("/svc/data", []byte("1"), -1); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-dataWatch:
		if ev.Type != zk.EventNodeDataChanged || ev.Path != "/svc/data" {
			t.Fatalf("restored data watch got %+v", ev)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the data watch did not fire after the reconnect")
	}
	holderReleased.Store(true)
	if err := lock.Unlock(); err != nil {
		t.Fatalf("holder unlock after the reconnect: %v", err)
	}
	select {
	case err := <-waiterDone:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not get the lock after the holder unlocked")
	}
}

var errOverlap = errorString("the waiter got the lock before the holder released it")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestKazooLockSurvivesKill: a kazoo client holding a Lock through the
// member that is killed with SIGKILL reconnects to another member with the
// same session and still holds the lock; a waiter gets it only after the
// holder releases it.
func TestKazooLockSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real latchd processes")
	}
	requireKazoo(t)
	c := proccluster.Start(t, proccluster.Options{Nodes: 3, ZK: true})
	c.WaitLeader(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "testdata/kazoo_kill.py", strings.Join(zkAddrs(c, -1), ","))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := newOutput()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { err := cmd.Wait(); out.finish(); exited <- err }()
	defer func() {
		stdin.Close()
		if t.Failed() {
			t.Logf("kazoo:\n%s", out.String())
		}
	}()
	at := out.waitFor(t, 0, "holding ", time.Minute)
	end := out.waitFor(t, at, "\n", 10*time.Second)
	addr := strings.TrimSpace(out.String()[at:end])
	victim := -1
	for i, m := range c.Members {
		if m.ZKAddr == addr {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("holder connected to %q, not a member", addr)
	}
	c.Kill(victim)
	if _, err := io.WriteString(stdin, "killed\n"); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, end, "ok kill", 2*time.Minute)
	if err := <-exited; err != nil {
		t.Fatalf("kazoo: %v", err)
	}
}
