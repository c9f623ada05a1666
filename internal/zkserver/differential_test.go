package zkserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/latch-io/latch/internal/testkit/freeport"
	"github.com/latch-io/latch/internal/zkproto"
)

// zookeeperJar is Debian's ZooKeeper server and client (package zookeeper).
const zookeeperJar = "/usr/share/java/zookeeper.jar"

// startZooKeeper starts a real ZooKeeper 3.8 in standalone mode on
// 127.0.0.1 with its own data dir and port, waits until it answers ruok,
// and stops it (by its PID) when the test ends. It returns its address.
func startZooKeeper(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(zookeeperJar); err != nil {
		t.Skipf("%s absent (%v): install Debian's zookeeper (.ci/run does)", zookeeperJar, err)
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("java absent: install default-jdk-headless (.ci/run does)")
	}
	dir := t.TempDir()
	addr := freeport.Addr(t)
	_, port, _ := net.SplitHostPort(addr)
	cfg := fmt.Sprintf("tickTime=2000\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n",
		filepath.Join(dir, "data"), port)
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out := newOutput()
	cmd := exec.Command("java", "-cp", "/etc/zookeeper/conf:"+zookeeperJar, "org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ZooKeeper: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); out.finish(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("ZooKeeper output:\n%s", out.String())
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !answersRuok(addr) {
		select {
		case <-exited:
			t.Fatalf("ZooKeeper exited before answering:\n%s", out.String())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ZooKeeper on %s did not answer ruok within 90s", addr)
		}
	}
	return addr
}

// answersRuok reports whether addr answers ruok with imok.
func answersRuok(addr string) bool {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := nc.Write([]byte("ruok")); err != nil {
		return false
	}
	buf := make([]byte, 4)
	n, _ := nc.Read(buf)
	return string(buf[:n]) == "imok"
}

// eventLog keeps the node events a client receives, in order.
type eventLog struct {
	mu     sync.Mutex
	cond   *sync.Cond
	events []string
}

func newEventLog(ch <-chan zk.Event) *eventLog {
	l := &eventLog{}
	l.cond = sync.NewCond(&l.mu)
	go func() {
		for ev := range ch {
			if ev.Type == zk.EventSession || ev.Type == zk.EventNotWatching {
				continue
			}
			l.mu.Lock()
			l.events = append(l.events, fmt.Sprintf("%s %s", ev.Type, ev.Path))
			l.cond.Broadcast()
			l.mu.Unlock()
		}
	}()
	return l
}

// waitFor waits until the log holds event, failing after 20s.
func (l *eventLog) waitFor(t *testing.T, event string) {
	t.Helper()
	timer := time.AfterFunc(20*time.Second, func() { l.mu.Lock(); l.cond.Broadcast(); l.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(20 * time.Second)
	l.mu.Lock()
	defer l.mu.Unlock()
	for !containsString(l.events, event) {
		if time.Now().After(deadline) {
			t.Fatalf("no event %q within 20s; events %v", event, l.events)
		}
		l.cond.Wait()
	}
}

func (l *eventLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// diffTarget is one server under the script: two go-zookeeper clients (a
// and b, with their event logs) and a raw client for multi.
type diffTarget struct {
	t          *testing.T
	a, b       *zk.Conn
	aLog, bLog *eventLog
	raw        *rawClient
}

func newDiffTarget(t *testing.T, addr string) *diffTarget {
	a, aEvents := connect(t, []string{addr}, 10*time.Second)
	b, bEvents := connect(t, []string{addr}, 10*time.Second)
	raw := dialRaw(t, addr)
	raw.session()
	return &diffTarget{t: t, a: a, b: b, aLog: newEventLog(aEvents), bLog: newEventLog(bEvents), raw: raw}
}

var seqSuffix = regexp.MustCompile(`\d{10}$`)

// norm renders a path with its sequential suffix (if any) as <seq>: the
// numbers differ (docs/zookeeper.md), their form does not.
func norm(path string) string { return seqSuffix.ReplaceAllString(path, "<seq>") }

// code renders an error as ZooKeeper's name for it.
func code(err error) string {
	if err == nil {
		return "OK"
	}
	for _, e := range []error{zk.ErrNoNode, zk.ErrNodeExists, zk.ErrBadVersion, zk.ErrNotEmpty, zk.ErrNoChildrenForEphemerals,
		zk.ErrBadArguments, zk.ErrNoAuth, zk.ErrInvalidACL, zk.ErrAPIError} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "error: " + err.Error()
}

// stat renders the fields of a Stat that latch and ZooKeeper share
// (docs/zookeeper.md "Stat"): zxids only as whether the node was modified
// and its children changed since created, times only as set and in order,
// aversion not at all, the owner as none, the reader's session or another.
func stat(s *zk.Stat, reader int64) string {
	if s == nil {
		return "nil"
	}
	owner := "other"
	switch s.EphemeralOwner {
	case 0:
		owner = "none"
	case reader:
		owner = "own"
	}
	return fmt.Sprintf("v=%d len=%d kids=%d cv=%d owner=%s modified=%v kids-changed=%v times=%v", s.Version, s.DataLength, s.NumChildren, s.Cversion,
		owner, s.Mzxid != s.Czxid, s.Pzxid != s.Czxid, s.Ctime > 0 && s.Mtime >= s.Ctime)
}

// goStat is s as go-zookeeper gives a Stat, for stat.
func goStat(s zkproto.Stat) *zk.Stat {
	return &zk.Stat{Czxid: s.Czxid, Mzxid: s.Mzxid, Ctime: s.Ctime, Mtime: s.Mtime, Version: s.Version,
		Cversion: s.Cversion, Aversion: s.Aversion, EphemeralOwner: s.EphemeralOwner, DataLength: s.DataLength,
		NumChildren: s.NumChildren, Pzxid: s.Pzxid}
}

// diffStep is one step of the script; it returns its outcome as text.
type diffStep struct {
	name string
	run  func(d *diffTarget) string
}

// sentinel waits until the client's events up to now have arrived: it
// watches a new node, creates it, and waits for its NodeCreated.
func (d *diffTarget) sentinel(c *zk.Conn, log *eventLog, name string) string {
	path := "/sentinel-" + name
	if _, _, _, err := c.ExistsW(path); err != nil {
		return code(err)
	}
	if _, err := c.Create(path, nil, 0, openACL); err != nil {
		return code(err)
	}
	log.waitFor(d.t, "EventNodeCreated "+path)
	return "OK"
}

// multiOutcome renders a raw multi's per-operation results.
func (d *diffTarget) multiOutcome(ops ...zkOp) string {
	got := d.raw.callMulti(ops...)
	parts := make([]string, len(got.headers))
	for i, h := range got.headers {
		parts[i] = fmt.Sprintf("%d:%d", h.Type, h.Err)
	}
	for _, p := range got.paths {
		parts = append(parts, norm(p))
	}
	return strings.Join(parts, " ")
}

func diffScript() []diffStep {
	return []diffStep{
		{"create /d", func(d *diffTarget) string {
			p, err := d.a.Create("/d", []byte("root"), 0, openACL)
			return p + " " + code(err)
		}},
		{"create /d again", func(d *diffTarget) string { _, err := d.a.Create("/d", nil, 0, openACL); return code(err) }},
		{"create under a missing parent", func(d *diffTarget) string { _, err := d.a.Create("/d/x/y", nil, 0, openACL); return code(err) }},
		{"create /", func(d *diffTarget) string { _, err := d.a.Create("/", nil, 0, openACL); return code(err) }},
		{"exists watch on a missing node", func(d *diffTarget) string {
			ok, s, _, err := d.a.ExistsW("/d/w")
			return fmt.Sprint(ok, " ", stat(s, 0), " ", code(err))
		}},
		{"getData watch", func(d *diffTarget) string {
			v, s, _, err := d.a.GetW("/d")
			return fmt.Sprintf("%q %s %s", v, stat(s, d.a.SessionID()), code(err))
		}},
		{"getChildren watch", func(d *diffTarget) string {
			c, s, _, err := d.a.ChildrenW("/d")
			return fmt.Sprint(c, " ", stat(s, 0), " ", code(err))
		}},
		{"b creates /d/w", func(d *diffTarget) string {
			p, err := d.b.Create("/d/w", []byte("w"), 0, openACL)
			return p + " " + code(err)
		}},
		{"b sets /d at version 0", func(d *diffTarget) string {
			s, err := d.b.Set("/d", []byte("v1"), 0)
			return stat(s, 0) + " " + code(err)
		}},
		{"b sets /d at version 0 again", func(d *diffTarget) string { _, err := d.b.Set("/d", []byte("v2"), 0); return code(err) }},
		{"b sets a missing node", func(d *diffTarget) string { _, err := d.b.Set("/d/none", nil, -1); return code(err) }},
		{"b sets /d at any version", func(d *diffTarget) string {
			s, err := d.b.Set("/d", []byte("v2"), -1)
			return stat(s, 0) + " " + code(err)
		}},
		{"a creates an ephemeral", func(d *diffTarget) string {
			p, err := d.a.Create("/d/e", []byte("eph"), zk.FlagEphemeral, openACL)
			_, s, _ := d.a.Exists("/d/e")
			return p + " " + code(err) + " " + stat(s, d.a.SessionID())
		}},
		{"b reads the ephemeral", func(d *diffTarget) string {
			_, s, _, err := d.b.ExistsW("/d/e")
			return stat(s, d.b.SessionID()) + " " + code(err)
		}},
		{"child of an ephemeral", func(d *diffTarget) string { _, err := d.a.Create("/d/e/c", nil, 0, openACL); return code(err) }},
		{"sequential creates", func(d *diffTarget) string {
			p1, err1 := d.a.Create("/d/s-", nil, zk.FlagSequence, openACL)
			p2, err2 := d.a.Create("/d/s-", nil, zk.FlagSequence, openACL)
			p3, err3 := d.a.Create("/d/es-", nil, zk.FlagSequence|zk.FlagEphemeral, openACL)
			return fmt.Sprint(norm(p1), code(err1), norm(p2), code(err2), norm(p3), code(err3), p1 < p2)
		}},
		{"getData watch on /d/w", func(d *diffTarget) string { _, _, _, err := d.a.GetW("/d/w"); return code(err) }},
		{"delete at a wrong version", func(d *diffTarget) string { return code(d.b.Delete("/d/w", 5)) }},
		{"delete at its version", func(d *diffTarget) string { return code(d.b.Delete("/d/w", 0)) }},
		{"delete a parent", func(d *diffTarget) string { return code(d.b.Delete("/d", -1)) }},
		{"delete a missing node", func(d *diffTarget) string { return code(d.b.Delete("/d/none", -1)) }},
		{"children of /d", func(d *diffTarget) string {
			c, s, err := d.a.Children("/d")
			for i := range c {
				c[i] = norm(c[i])
			}
			sort.Strings(c)
			return fmt.Sprint(c, " ", stat(s, 0), " ", code(err))
		}},
		{"getData and getChildren of a missing node", func(d *diffTarget) string {
			_, _, err1 := d.a.Get("/d/none")
			_, _, err2 := d.a.Children("/d/none")
			return code(err1) + " " + code(err2)
		}},
		{"empty value", func(d *diffTarget) string {
			_, err := d.a.Create("/d/empty", nil, 0, openACL)
			v, s, err2 := d.a.Get("/d/empty")
			return fmt.Sprint(code(err), len(v), stat(s, 0), code(err2))
		}},
		{"multi success", func(d *diffTarget) string {
			return d.multiOutcome(mcreate("/d/m1", 0), mcreate("/d/m1/a", 0), set("/d/m1", "x", 0), check("/d/m1", 1), del("/d/m1/a", -1))
		}},
		{"multi refused in the middle", func(d *diffTarget) string {
			return d.multiOutcome(mcreate("/d/m2", 0), check("/d", 9), mcreate("/d/m3", 0))
		}},
		{"multi create under a missing parent", func(d *diffTarget) string { return d.multiOutcome(mcreate("/d/nope/a", 0)) }},
		{"multi parent deleted earlier in it", func(d *diffTarget) string { return d.multiOutcome(del("/d/m1", -1), mcreate("/d/m1/b", 0)) }},
		{"multi refused: node exists, not empty, bad version", func(d *diffTarget) string {
			return d.multiOutcome(mcreate("/d", 0)) + " | " + d.multiOutcome(del("/d", -1)) + " | " + d.multiOutcome(set("/d", "y", 7))
		}},
		{"multi child of an ephemeral", func(d *diffTarget) string { return d.multiOutcome(mcreate("/d/e/c", 0)) }},
		{"nothing of the refused multis", func(d *diffTarget) string {
			var out []string
			for _, p := range []string{"/d/m1", "/d/m2", "/d/m3", "/d/nope"} {
				ok, _, err := d.a.Exists(p)
				out = append(out, fmt.Sprint(p, ok, code(err)))
			}
			return strings.Join(out, " ")
		}},
		{"multiRead", func(d *diffTarget) string {
			h, rest := d.raw.call(zkproto.OpMultiRead, multiRequest{
				{zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/d"}},
				{zkproto.OpGetChildren, &zkproto.PathWatchRequest{Path: "/d/e"}},
				{zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/d/none"}},
			})
			got := decodeMultiReply(d.t, rest)
			if len(got.stats) != 1 {
				return fmt.Sprint(h.Err, got.codes(), "stats:", len(got.stats))
			}
			return fmt.Sprint(h.Err, got.codes(), len(got.data), string(got.data[0]), " ", stat(goStat(got.stats[0]), 0))
		}},
		{"paths ZooKeeper refuses to write", func(d *diffTarget) string {
			var out []string
			for _, name := range []string{"/d/\U0001F600", "/d/\uE000", "/d/\uFFF0", "/d/é"} {
				h, _ := d.raw.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: name, ACL: worldAnyone})
				_, err := d.a.Set(name, []byte("x"), -1)
				out = append(out, fmt.Sprintf("%q create %d set %s", name, h.Err, code(err)))
			}
			return strings.Join(out, "; ")
		}},
		// Types 4 and 5 (persistent, persistent recursive) are ZooKeeper
		// 3.9's; the 3.8 server this runs against refuses them as it
		// refuses 9.
		{"watch operations with a type or mode out of range", func(d *diffTarget) string {
			var out []string
			for _, c := range []struct {
				op zkproto.OpCode
				t  int32
			}{{zkproto.OpCheckWatches, 0}, {zkproto.OpCheckWatches, 9}, {zkproto.OpRemoveWatches, 6},
				{zkproto.OpAddWatch, 2}, {zkproto.OpCheckWatches, 2}, {zkproto.OpAddWatch, 0}} {
				h, _ := d.raw.call(c.op, &zkproto.PathTypeRequest{Path: "/d", Type: c.t})
				out = append(out, fmt.Sprintf("%d/%d:%d", c.op, c.t, h.Err))
			}
			return strings.Join(out, " ")
		}},
		{"a's events have arrived", func(d *diffTarget) string { return d.sentinel(d.a, d.aLog, "a") }},
		{"a closes its session; b sees its ephemerals go", func(d *diffTarget) string {
			d.a.Close()
			d.bLog.waitFor(d.t, "EventNodeDeleted /d/e")
			ok, _, err := d.b.Exists("/d/e")
			c, _, err2 := d.b.Children("/d")
			for i := range c {
				c[i] = norm(c[i])
			}
			sort.Strings(c)
			return fmt.Sprint(ok, code(err), c, code(err2))
		}},
		{"b's events have arrived", func(d *diffTarget) string { return d.sentinel(d.b, d.bLog, "b") }},
	}
}

// runScript runs the script against d and returns the outcomes, then a's
// and b's events.
func runScript(d *diffTarget) (outcomes, aEvents, bEvents []string) {
	for _, step := range diffScript() {
		outcomes = append(outcomes, step.name+": "+step.run(d))
	}
	return outcomes, d.aLog.snapshot(), d.bLog.snapshot()
}

// TestDifferentialZooKeeper: the same script of operations (creates of
// every mode, sets and deletes with versions, reads with watches, multi
// committed and refused, multiRead, error cases, a session's end) against
// a real ZooKeeper 3.8 and against latch: the outcomes (codes, stats
// without zxids and times, sequential names without their numbers) and
// each client's event sequence must be the same.
func TestDifferentialZooKeeper(t *testing.T) {
	zkAddr := startZooKeeper(t)
	c := startZK(t, 1, Config{})
	wantOut, wantA, wantB := runScript(newDiffTarget(t, zkAddr))
	gotOut, gotA, gotB := runScript(newDiffTarget(t, c.addrs[0]))
	for i := range wantOut {
		if gotOut[i] != wantOut[i] {
			t.Errorf("step %d differs:\n  ZooKeeper: %s\n  latch:     %s", i, wantOut[i], gotOut[i])
		}
	}
	if fmt.Sprint(gotA) != fmt.Sprint(wantA) {
		t.Errorf("a's events differ:\n  ZooKeeper: %v\n  latch:     %v", wantA, gotA)
	}
	if fmt.Sprint(gotB) != fmt.Sprint(wantB) {
		t.Errorf("b's events differ:\n  ZooKeeper: %v\n  latch:     %v", wantB, gotB)
	}
	if len(wantA) < 5 || len(wantB) < 2 {
		t.Errorf("the script caused too few events to compare: a %v, b %v", wantA, wantB)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("ZooKeeper outcomes:\n%s\na's events %v\nb's events %v", strings.Join(wantOut, "\n"), wantA, wantB)
	}
}

// knownDifference is a documented difference (docs/zookeeper.md): the
// same step, with the outcome each server must give.
type knownDifference struct {
	name             string
	run              func(d *diffTarget) string
	zookeeper, latch string
}

// TestDifferentialKnownDifferences: the differences docs/zookeeper.md
// lists, shown on both servers, so that the table stays true.
func TestDifferentialKnownDifferences(t *testing.T) {
	zkAddr := startZooKeeper(t)
	c := startZK(t, 1, Config{})
	diffs := []knownDifference{
		{"delete another session's ephemeral node", func(d *diffTarget) string {
			if _, err := d.a.Create("/k-eph", nil, zk.FlagEphemeral, openACL); err != nil {
				return code(err)
			}
			return code(d.b.Delete("/k-eph", -1))
		}, "OK", zk.ErrNoAuth.Error()},
		{"sequential create ending in '/'", func(d *diffTarget) string {
			if _, err := d.a.Create("/k-seq", nil, 0, openACL); err != nil {
				return code(err)
			}
			p, err := d.a.Create("/k-seq/", nil, zk.FlagSequence, openACL)
			return norm(p) + " " + code(err)
		}, "/k-seq/<seq> OK", " " + zk.ErrBadArguments.Error()},
	}
	zkTarget, latchTarget := newDiffTarget(t, zkAddr), newDiffTarget(t, c.addrs[0])
	for _, diff := range diffs {
		if got := diff.run(zkTarget); got != diff.zookeeper {
			t.Errorf("%s: ZooKeeper gives %q, documented %q", diff.name, got, diff.zookeeper)
		}
		if got := diff.run(latchTarget); got != diff.latch {
			t.Errorf("%s: latch gives %q, documented %q", diff.name, got, diff.latch)
		}
	}
}
