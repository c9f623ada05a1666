package ui_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// The deadlines the dashboard must meet (issue 17).
const (
	lockShownWithin   = 2 * time.Second // a lock taken by latchctl appears with its token
	leaderShownWithin = 5 * time.Second // a new leader appears after kill -9 of the old one
	firstLoadWithin   = 20 * time.Second
)

// lockName is the lock latchctl takes; keyPath a node the key browser lists.
const (
	lockName = "ui-dashboard"
	keyPath  = "/ui-test"
)

// pageState is what the test reads of the dashboard's DOM.
type pageState struct {
	Leader  string `json:"leader"`
	Members []struct {
		Name   string `json:"name"`
		Role   string `json:"role"`
		Health string `json:"health"`
	} `json:"members"`
	Locks []struct {
		Name  string `json:"name"`
		Token string `json:"token"`
	} `json:"locks"`
	Keys []string `json:"keys"`
}

// stateScript reads pageState from the page.
const stateScript = `(() => ({
  leader: document.getElementById("leader-name").textContent,
  members: [...document.querySelectorAll("#members tbody tr[data-member]")].map(r => ({
    name: r.dataset.member, role: r.dataset.role, health: r.querySelector("td.health").textContent })),
  locks: [...document.querySelectorAll("#locks tbody tr[data-lock]")].map(r => ({
    name: r.dataset.lock, token: r.querySelector("td.token").textContent })),
  keys: [...document.querySelectorAll("#kv-children tbody tr[data-key]")].map(r => r.dataset.key),
}))()`

// leaders returns the members the page shows with the role leader.
func (s pageState) leaders() []string {
	var names []string
	for _, m := range s.Members {
		if m.Role == "leader" {
			names = append(names, m.Name)
		}
	}
	return names
}

// health returns the health the page shows for member name.
func (s pageState) health(name string) string {
	for _, m := range s.Members {
		if m.Name == name {
			return m.Health
		}
	}
	return ""
}

// lockToken returns the token the page shows for lock name.
func (s pageState) lockToken(name string) string {
	for _, l := range s.Locks {
		if l.Name == name {
			return l.Token
		}
	}
	return ""
}

// waitFor reads the page until ok holds of it or within passes, and
// returns the last state read.
func waitFor(b *browser, within time.Duration, ok func(pageState) bool) (pageState, bool) {
	deadline := time.Now().Add(within)
	for {
		s, err := eval[pageState](b, stateScript)
		if err == nil && ok(s) {
			return s, true
		}
		if time.Now().After(deadline) {
			return s, false
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func TestDashboardInBrowser(t *testing.T) {
	b := startBrowser(t)
	shots := screenshotDir(t)
	c := proccluster.Start(t, proccluster.Options{Nodes: 3})
	leader := c.WaitLeader(30 * time.Second)
	defer func() {
		if t.Failed() {
			c.LogTails(40)
		}
	}()
	putNode(t, c.Members[leader].ClientURL, keyPath, "shown by the key browser")

	// The page is served by a follower, so that it outlives the leader's kill.
	viewer := (leader + 1) % 3
	origin := c.Members[viewer].ClientURL
	b.navigate(t, origin+"/ui")

	leaderName := c.Members[leader].Name
	s, ok := waitFor(b, firstLoadWithin, func(s pageState) bool {
		return len(s.Members) == 3 && len(s.leaders()) == 1 && s.Leader == leaderName && s.health(leaderName) == "up"
	})
	if !ok {
		t.Fatalf("the page does not list 3 members with one leader %s within %v: %+v", leaderName, firstLoadWithin, s)
	}
	if got := s.leaders()[0]; got != leaderName {
		t.Fatalf("the members table marks %s as leader, the members name %s", got, leaderName)
	}
	if s, ok = waitFor(b, firstLoadWithin, func(s pageState) bool { return contains(s.Keys, keyPath) }); !ok {
		t.Fatalf("the key browser does not list %s within %v: keys %v", keyPath, firstLoadWithin, s.Keys)
	}
	b.screenshot(t, shots, "1-cluster")

	token, held := holdLock(t, c)
	s, ok = waitFor(b, lockShownWithin, func(s pageState) bool { return s.lockToken(lockName) != "" })
	if !ok {
		t.Fatalf("lock %s held by latchctl with token %d is not shown within %v of latchctl holding it: locks %+v",
			lockName, token, lockShownWithin, s.Locks)
	}
	t.Logf("lock %s shown %v after latchctl held it", lockName, time.Since(held).Round(time.Millisecond))
	if got := s.lockToken(lockName); got != strconv.FormatUint(token, 10) {
		t.Fatalf("lock %s shows token %q, latchctl holds it with token %d", lockName, got, token)
	}
	b.screenshot(t, shots, "2-lock")

	c.Kill(leader)
	killed := time.Now()
	s, ok = waitFor(b, leaderShownWithin, func(s pageState) bool {
		l := s.leaders()
		return len(l) == 1 && l[0] != leaderName && s.Leader == l[0] && s.health(leaderName) == "down"
	})
	if !ok {
		t.Fatalf("no new leader (other than the killed %s) shown within %v of its kill -9: %+v", leaderName, leaderShownWithin, s)
	}
	t.Logf("new leader %s shown %v after kill -9 of %s", s.Leader, time.Since(killed).Round(time.Millisecond), leaderName)
	newLeader := c.WaitLeader(30 * time.Second)
	if got := c.Members[newLeader].Name; got != s.Leader {
		t.Fatalf("the page shows leader %s, the live members agree on %s", s.Leader, got)
	}
	b.screenshot(t, shots, "3-new-leader")

	if b.requestCount() == 0 {
		t.Fatalf("the browser reported no request: the network check would prove nothing")
	}
	if foreign := b.foreignRequests(origin); len(foreign) > 0 {
		t.Fatalf("the page fetched from origins other than %s: %v", origin, foreign)
	}
	if thrown := b.exceptionsThrown(); len(thrown) > 0 {
		t.Fatalf("the page threw JavaScript exceptions: %v", thrown)
	}
}

// holdLock starts 'latchctl lock' on lockName running cat, which holds
// until the test closes its stdin, and returns the fencing token latchctl
// reports and when it reported it. The cleanup ends cat (and so latchctl,
// which releases the lock), or kills latchctl's process group.
func holdLock(t *testing.T, c *proccluster.Cluster) (uint64, time.Time) {
	t.Helper()
	cmd := exec.Command(buildLatchctl(t), "--endpoints", strings.Join(c.URLs(), ","),
		"lock", lockName, "--session-timeout", "10s", "--", "cat")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start latchctl: %v", err)
	}
	exited := make(chan error, 1)
	tokens := make(chan uint64, 1)
	var output strings.Builder
	go func() {
		scanTokens(stderr, tokens, &output)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { stopLatchctl(t, cmd, stdin, exited) })
	select {
	case token := <-tokens:
		return token, time.Now()
	case err := <-exited:
		t.Fatalf("latchctl lock exited before holding: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("latchctl lock did not hold %s within 30s", lockName)
	}
	return 0, time.Time{}
}

// holdingLine is latchctl's report that it holds the lock.
var holdingLine = regexp.MustCompile(`holding with fencing token (\d+)`)

// scanTokens reads latchctl's stderr to its end, sending the first token
// it reports.
func scanTokens(r io.Reader, tokens chan<- uint64, output *strings.Builder) {
	scanner := bufio.NewScanner(r)
	sent := false
	for scanner.Scan() {
		output.WriteString(scanner.Text() + "\n")
		if m := holdingLine.FindStringSubmatch(scanner.Text()); m != nil && !sent {
			if token, err := strconv.ParseUint(m[1], 10, 64); err == nil {
				tokens <- token
				sent = true
			}
		}
	}
}

// stopLatchctl closes cat's stdin so that it ends and latchctl releases
// the lock and exits; if it has not within 15 s, it kills latchctl's
// process group (latchctl and cat, nothing else).
func stopLatchctl(t *testing.T, cmd *exec.Cmd, stdin io.Closer, exited <-chan error) {
	_ = stdin.Close()
	select {
	case <-exited:
		return
	case <-time.After(15 * time.Second):
	}
	t.Logf("latchctl did not exit after its command's stdin closed: killing its process group %d", cmd.Process.Pid)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// putNode writes value at path through the member at base.
func putNode(t *testing.T, base, path, value string) {
	t.Helper()
	body := strings.NewReader(fmt.Sprintf(`{"value":%q}`, value))
	req, err := http.NewRequest(http.MethodPut, base+"/v1/kv"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("put %s: %v", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("put %s: status %d", path, resp.StatusCode)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
