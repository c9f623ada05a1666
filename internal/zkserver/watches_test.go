package zkserver

import (
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// TestOneShotWatches: data, exist and child watches fire once each, with
// ZooKeeper's event types, and only for the changes they watch.
func TestOneShotWatches(t *testing.T) {
	c := startZK(t, 1, Config{})
	conn, _ := connect(t, c.addrs, 5*time.Second)
	writer, _ := connect(t, c.addrs, 5*time.Second)

	// exists on a missing node sets a watch that fires on its creation.
	ok, _, created, err := conn.ExistsW("/w")
	if err != nil || ok {
		t.Fatalf("existsW /w = %v, %v", ok, err)
	}
	if _, err := writer.Create("/w", []byte("a"), 0, openACL); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, created, "created"); ev.Type != zk.EventNodeCreated || ev.Path != "/w" {
		t.Fatalf("exist watch got %+v, want NodeCreated /w", ev)
	}

	// A data watch ignores a child change and fires on the data change.
	_, _, data, err := conn.GetW("/w")
	if err != nil {
		t.Fatal(err)
	}
	_, _, kids, err := conn.ChildrenW("/w")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Create("/w/c", nil, 0, openACL); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, kids, "children"); ev.Type != zk.EventNodeChildrenChanged || ev.Path != "/w" {
		t.Fatalf("child watch got %+v, want NodeChildrenChanged /w", ev)
	}
	if _, err := writer.Set("/w", []byte("b"), -1); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, data, "data"); ev.Type != zk.EventNodeDataChanged || ev.Path != "/w" {
		t.Fatalf("data watch got %+v, want NodeDataChanged /w (not fired by the child change)", ev)
	}

	// One-shot: a second change with no new watch sends nothing; a watch
	// set after it sees only the next change. The marker write proves the
	// connection delivered everything before it.
	if _, err := writer.Set("/w", []byte("c"), -1); err != nil {
		t.Fatal(err)
	}
	_, _, data, err = conn.GetW("/w")
	if err != nil {
		t.Fatal(err)
	}
	_, _, marker, err := conn.ExistsW("/marker")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Create("/marker", nil, 0, openACL); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, marker, "marker")
	select {
	case ev := <-data:
		t.Fatalf("data watch set after the last change fired: %+v", ev)
	default:
	}

	// A delete fires the data and the child watch of the node.
	_, _, kids, err = conn.ChildrenW("/w/c")
	if err != nil {
		t.Fatal(err)
	}
	_, _, cdata, err := conn.GetW("/w/c")
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.Delete("/w/c", -1); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan zk.Event{kids, cdata} {
		if ev := waitEvent(t, ch, "deleted"); ev.Type != zk.EventNodeDeleted || ev.Path != "/w/c" {
			t.Fatalf("watch got %+v, want NodeDeleted /w/c", ev)
		}
	}
}

// TestLockRecipe: go-zookeeper's Lock gives mutual exclusion among
// clients on different members.
func TestLockRecipe(t *testing.T) {
	c := startZK(t, 3, Config{})
	const clients, rounds = 3, 4
	var (
		mu      sync.Mutex
		holders int
		maxSeen int
		wg      sync.WaitGroup
		errs    = make(chan error, clients*rounds)
	)
	for i := range clients {
		conn, _ := connect(t, []string{c.addrs[i]}, 5*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock := zk.NewLock(conn, "/recipes/lock", openACL)
			for range rounds {
				if err := lock.Lock(); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				holders++
				maxSeen = max(maxSeen, holders)
				mu.Unlock()
				// Hold it across a write, so that an overlap would show.
				if _, err := conn.Create("/recipes/held-", nil, zk.FlagSequence|zk.FlagEphemeral, openACL); err != nil {
					errs <- err
				}
				mu.Lock()
				holders--
				mu.Unlock()
				if err := lock.Unlock(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("lock recipe: %v", err)
	}
	if maxSeen != 1 {
		t.Fatalf("%d clients held the lock at once", maxSeen)
	}
}
