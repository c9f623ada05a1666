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

// lockName is the lock latchctl takes, roleName the election it wins with
// roleValue; keyPath a node the key browser lists, with keyValue.
const (
	lockName  = "ui-dashboard"
	roleName  = "ui-scheduler"
	roleValue = "10.0.0.7:9000"
	keyPath   = "/ui-test"
	keyValue  = "shown by the key browser"
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
		Name   string `json:"name"`
		Token  string `json:"token"`
		Holder string `json:"holder"`
	} `json:"locks"`
	Elections []struct {
		Role  string `json:"role"`
		Value string `json:"value"`
		Token string `json:"token"`
	} `json:"elections"`
	Sessions     []string `json:"sessions"`
	SessionCount string   `json:"sessionCount"`
	Keys         []string `json:"keys"`
	NodeValue    string   `json:"nodeValue"`
	Charts       int      `json:"charts"`
	Watches      string   `json:"watches"`
}

// stateScript reads pageState from the page.
const stateScript = `(() => ({
  leader: document.getElementById("leader-name").textContent,
  members: [...document.querySelectorAll("#members tbody tr[data-member]")].map(r => ({
    name: r.dataset.member, role: r.dataset.role, health: r.querySelector("td.health").textContent })),
  locks: [...document.querySelectorAll("#locks tbody tr[data-lock]")].map(r => ({
    name: r.dataset.lock, token: r.querySelector("td.token").textContent, holder: r.cells[1].textContent })),
  elections: [...document.querySelectorAll("#elections tbody tr[data-election]")].map(r => ({
    role: r.dataset.election, value: r.cells[2].textContent, token: r.cells[3].textContent })),
  sessions: [...document.querySelectorAll("#sessions tbody tr[data-session]")].map(r => r.dataset.session),
  sessionCount: document.getElementById("sessions-count").textContent,
  keys: [...document.querySelectorAll("#kv-children tbody tr[data-key]")].map(r => r.dataset.key),
  nodeValue: (document.querySelector("#kv-node pre") || {}).textContent || "",
  charts: document.querySelectorAll("svg polyline").length,
  watches: document.getElementById("watches-registered").textContent,
}))()`

// openKeyScript clicks the key browser's link of keyPath.
const openKeyScript = `document.querySelector('#kv-children tr[data-key="` + keyPath + `"] a').click()`

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

// lockToken returns the token and holder the page shows for lock name.
func (s pageState) lockToken(name string) (token, holder string) {
	for _, l := range s.Locks {
		if l.Name == name {
			return l.Token, l.Holder
		}
	}
	return "", ""
}

// electionToken returns the token and value the page shows for role.
func (s pageState) electionToken(role string) (token, value string) {
	for _, e := range s.Elections {
		if e.Role == role {
			return e.Token, e.Value
		}
	}
	return "", ""
}

// waitFor reads the page until ok holds of it or within passes, and
// returns the last state read.
func waitFor(b *browser, within time.Duration, ok func(pageState) bool) (pageState, bool) {
	return readUntil(b, stateScript, within, ok)
}

// readUntil evaluates script, which reads a T from the page, until ok
// holds of it or within passes, and returns the last T read.
func readUntil[T any](b *browser, script string, within time.Duration, ok func(T) bool) (T, bool) {
	deadline := time.Now().Add(within)
	for {
		s, err := eval[T](b, script)
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
	putNode(t, c.Members[leader].ClientURL, keyPath, keyValue)

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
	if _, err := eval[any](b, openKeyScript); err != nil {
		t.Fatalf("click %s in the key browser: %v", keyPath, err)
	}
	if s, ok = waitFor(b, firstLoadWithin, func(s pageState) bool { return s.NodeValue == keyValue }); !ok {
		t.Fatalf("the key browser does not show %s's value %q within %v: shows %q", keyPath, keyValue, firstLoadWithin, s.NodeValue)
	}
	if s, ok = waitFor(b, firstLoadWithin, func(s pageState) bool { return s.Charts == 3 && s.Watches != "—" }); !ok {
		t.Fatalf("the load charts and watch figures are not drawn from /metrics within %v: %d charts, watches %q",
			firstLoadWithin, s.Charts, s.Watches)
	}
	b.screenshot(t, shots, "1-cluster")

	token, held := hold(t, c, "lock", lockName)
	s, ok = waitFor(b, lockShownWithin, func(s pageState) bool { token, _ := s.lockToken(lockName); return token != "" })
	if !ok {
		t.Fatalf("lock %s held by latchctl with token %d is not shown within %v of latchctl holding it: locks %+v",
			lockName, token, lockShownWithin, s.Locks)
	}
	t.Logf("lock %s shown %v after latchctl held it", lockName, time.Since(held).Round(time.Millisecond))
	shownToken, holder := s.lockToken(lockName)
	if shownToken != strconv.FormatUint(token, 10) {
		t.Fatalf("lock %s shows token %q, latchctl holds it with token %d", lockName, shownToken, token)
	}
	if s, ok = waitFor(b, firstLoadWithin, func(s pageState) bool { return contains(s.Sessions, holder) }); !ok {
		t.Fatalf("the holder's session %s is not in the sessions table within %v: %v (count %s)", holder, firstLoadWithin, s.Sessions, s.SessionCount)
	}

	roleToken, _ := hold(t, c, "elect", roleName, "--value", roleValue)
	s, ok = waitFor(b, firstLoadWithin, func(s pageState) bool { token, _ := s.electionToken(roleName); return token != "" })
	if !ok {
		t.Fatalf("election %s won by latchctl is not shown within %v: %+v", roleName, firstLoadWithin, s.Elections)
	}
	if shown, value := s.electionToken(roleName); shown != strconv.FormatUint(roleToken, 10) || value != roleValue {
		t.Fatalf("election %s shows token %q value %q; latchctl leads with token %d value %q", roleName, shown, value, roleToken, roleValue)
	}
	b.screenshot(t, shots, "2-lock-and-election")

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

// hold starts 'latchctl lock NAME' or 'latchctl elect ROLE' (args, without
// the command) running cat, which holds until the test closes its stdin,
// and returns the fencing token latchctl reports and when it reported it.
// The cleanup ends cat (and so latchctl, which releases or resigns), or
// kills latchctl's process group.
func hold(t *testing.T, c *proccluster.Cluster, args ...string) (uint64, time.Time) {
	t.Helper()
	argv := append([]string{"--endpoints", strings.Join(c.URLs(), ",")}, args...)
	argv = append(argv, "--session-timeout", "10s", "--", "cat")
	cmd := exec.Command(proccluster.BuildLatchctl(t), argv...)
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
		t.Fatalf("latchctl %v exited before holding: %v\n%s", args, err, output.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("latchctl %v did not hold within 30s", args)
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
