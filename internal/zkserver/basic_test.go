package zkserver

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

var openACL = zk.WorldACL(zk.PermAll)

// TestCRUD: create, get, set, exists, children and delete through a real
// client, with ZooKeeper's versions, stats and error codes.
func TestCRUD(t *testing.T) {
	c := startZK(t, 1, Config{})
	conn, _ := connect(t, c.addrs, 5*time.Second)

	if p, err := conn.Create("/app", []byte("v0"), 0, openACL); err != nil || p != "/app" {
		t.Fatalf("create /app = %q, %v", p, err)
	}
	if _, err := conn.Create("/app", nil, 0, openACL); !errors.Is(err, zk.ErrNodeExists) {
		t.Fatalf("second create = %v, want ErrNodeExists", err)
	}
	if _, err := conn.Create("/missing/child", nil, 0, openACL); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("create under a missing parent = %v, want ErrNoNode", err)
	}
	data, stat, err := conn.Get("/app")
	if err != nil || string(data) != "v0" || stat.Version != 0 || stat.DataLength != 2 || stat.Czxid == 0 || stat.Czxid != stat.Mzxid {
		t.Fatalf("get /app = %q %+v %v", data, stat, err)
	}
	if _, err := conn.Set("/app", []byte("v1"), 5); !errors.Is(err, zk.ErrBadVersion) {
		t.Fatalf("set at a wrong version = %v, want ErrBadVersion", err)
	}
	st, err := conn.Set("/app", []byte("v1"), 0)
	if err != nil || st.Version != 1 || st.Mzxid <= stat.Mzxid {
		t.Fatalf("set at version 0 = %+v, %v", st, err)
	}
	if st, err = conn.Set("/app", []byte("v2"), -1); err != nil || st.Version != 2 {
		t.Fatalf("set at any version = %+v, %v", st, err)
	}
	if _, err := conn.Set("/nope", []byte("x"), -1); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("set of a missing node = %v, want ErrNoNode (and no node created)", err)
	}
	if ok, _, err := conn.Exists("/nope"); ok || err != nil {
		t.Fatalf("exists /nope = %v, %v", ok, err)
	}
	for _, name := range []string{"b", "a", "c"} {
		if _, err := conn.Create("/app/"+name, nil, 0, openACL); err != nil {
			t.Fatalf("create child %s: %v", name, err)
		}
	}
	children, stat, err := conn.Children("/app")
	if err != nil || len(children) != 3 || stat.NumChildren != 3 {
		t.Fatalf("children /app = %v %+v %v", children, stat, err)
	}
	if err := conn.Delete("/app", -1); !errors.Is(err, zk.ErrNotEmpty) {
		t.Fatalf("delete of a parent = %v, want ErrNotEmpty", err)
	}
	if err := conn.Delete("/app/a", 3); !errors.Is(err, zk.ErrBadVersion) {
		t.Fatalf("delete at a wrong version = %v, want ErrBadVersion", err)
	}
	if err := conn.Delete("/app/a", 0); err != nil {
		t.Fatalf("delete /app/a: %v", err)
	}
	if err := conn.Delete("/app/a", -1); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("delete again = %v, want ErrNoNode", err)
	}
	acl, _, err := conn.GetACL("/app")
	if err != nil || len(acl) != 1 || acl[0].Scheme != "world" || acl[0].ID != "anyone" || acl[0].Perms != zk.PermAll {
		t.Fatalf("getACL = %+v, %v", acl, err)
	}
	if _, err := conn.SetACL("/app", zk.DigestACL(zk.PermAll, "u", "p"), -1); err != nil {
		t.Fatalf("setACL: %v", err)
	}
	if p, err := conn.Sync("/app"); err != nil || p != "/app" {
		t.Fatalf("sync = %q, %v", p, err)
	}
	big := bytes.Repeat([]byte("x"), 100)
	if _, err := conn.Create("/big", big, 0, openACL); err != nil {
		t.Fatalf("create /big: %v", err)
	}
}

// TestSequentialAndEphemeral: sequential names carry a %010d suffix in
// creation order, and an ephemeral node goes with its session; ephemeral
// nodes take no children.
func TestSequentialAndEphemeral(t *testing.T) {
	c := startZK(t, 1, Config{})
	conn, _ := connect(t, c.addrs, 5*time.Second)
	if _, err := conn.Create("/q", nil, 0, openACL); err != nil {
		t.Fatal(err)
	}
	var names []string
	for range 3 {
		p, err := conn.Create("/q/item-", []byte("x"), zk.FlagSequence, openACL)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
	}
	for i, p := range names {
		suffix := p[len("/q/item-"):]
		if len(suffix) != 10 || (i > 0 && p <= names[i-1]) {
			t.Fatalf("sequential names %v: want a 10-digit increasing suffix", names)
		}
	}
	other, _ := connect(t, c.addrs, 5*time.Second)
	p, err := other.Create("/q/eph", nil, zk.FlagEphemeral, openACL)
	if err != nil {
		t.Fatal(err)
	}
	_, stat, err := other.Get(p)
	if err != nil || stat.EphemeralOwner != other.SessionID() {
		t.Fatalf("ephemeralOwner as its own session sees it = %#x, want %#x (%v)", stat.EphemeralOwner, other.SessionID(), err)
	}
	_, stat, err = conn.Get(p)
	if err != nil || stat.EphemeralOwner == 0 || stat.EphemeralOwner == other.SessionID() {
		t.Fatalf("ephemeralOwner as another session sees it = %#x: want nonzero and not the owner's id", stat.EphemeralOwner)
	}
	if _, err := other.Create("/q/eph/child", nil, 0, openACL); !errors.Is(err, zk.ErrNoChildrenForEphemerals) {
		t.Fatalf("child of an ephemeral = %v, want ErrNoChildrenForEphemerals", err)
	}
	ok, _, gone, err := conn.ExistsW(p)
	if err != nil || !ok {
		t.Fatalf("exists %s = %v, %v", p, ok, err)
	}
	other.Close()
	if ev := waitEvent(t, gone, "deletion"); ev.Type != zk.EventNodeDeleted || ev.Path != p {
		t.Fatalf("event %+v, want NodeDeleted of %s once its session closed", ev, p)
	}
	if ok, _, err := conn.Exists(p); ok || err != nil {
		t.Fatalf("exists %s after its session closed = %v, %v", p, ok, err)
	}
}

// TestSetDataAnyVersionUnderContention: setData with version -1 never
// fails for a version, however many writers race on the node (it was a
// compare-and-set retried 16 times, and 16 writers made it fail with
// BadVersion), and every write counts once in the node's version.
func TestSetDataAnyVersionUnderContention(t *testing.T) {
	c := startZK(t, 1, Config{})
	const writers, each = 16, 60
	conns := make([]*zk.Conn, writers)
	for i := range conns {
		conns[i], _ = connect(t, c.addrs, 5*time.Second)
	}
	if _, err := conns[0].Create("/contended", nil, 0, openACL); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for _, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				if _, err := conn.Set("/contended", []byte(fmt.Sprint(j)), -1); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("setData -1: %v", err)
	}
	_, stat, err := conns[0].Get("/contended")
	if err != nil {
		t.Fatal(err)
	}
	if stat.Version != writers*each {
		t.Fatalf("version %d after %d writes", stat.Version, writers*each)
	}
}
