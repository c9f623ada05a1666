package ui_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// rootPassword is the password of the root user TestDashboardLoginAndShards
// makes before it enables auth.
const rootPassword = "root-pw"

// authState is what the test reads of the page's login and shard parts.
type authState struct {
	Login      bool   `json:"login"`      // the login form shows
	MainShown  bool   `json:"mainShown"`  // the data panels are displayed
	Rows       int    `json:"rows"`       // table rows holding data, anywhere in the page
	LoginError string `json:"loginError"` // the form's error, if shown
	SignedIn   string `json:"signedIn"`   // the user shown as signed in, if any
	Token      string `json:"token"`      // the token in the tab's sessionStorage
	Leader     string `json:"leader"`
	Members    int    `json:"members"`
	MembersUp  int    `json:"membersUp"`
	Shards     []struct {
		Shard  string   `json:"shard"`
		Leader string   `json:"leader"`
		Cells  []string `json:"cells"`
	} `json:"shards"`
}

const authScript = `(() => {
  const shown = (id) => !document.getElementById(id).hidden;
  return {
    login: shown("login"),
    mainShown: getComputedStyle(document.querySelector("main")).display !== "none",
    rows: document.querySelectorAll("main tbody tr:not(:has(td.empty))").length,
    loginError: shown("login-error") ? document.getElementById("login-error").textContent : "",
    signedIn: shown("signed-in") ? document.getElementById("user-name").textContent : "",
    token: sessionStorage.getItem("latch.token") || "",
    leader: document.getElementById("leader-name").textContent,
    members: document.querySelectorAll("#members tbody tr[data-member]").length,
    membersUp: document.querySelectorAll("#members tbody td.health.up").length,
    shards: shown("shards-box") ? [...document.querySelectorAll("#shards tbody tr[data-shard]")].map(r => ({
      shard: r.dataset.shard, leader: r.dataset.leader, cells: [...r.cells].map(c => c.textContent) })) : [],
  };
})()`

// signInScript fills the login form and submits it.
func signInScript(user, password string) string {
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return `(() => { document.getElementById("login-user").value = ` + quote(user) + `;
  document.getElementById("login-password").value = ` + quote(password) + `;
  document.getElementById("login-form").requestSubmit(); return true; })()`
}

// waitAuth reads the page until ok holds of it or within passes.
func waitAuth(b *browser, within time.Duration, ok func(authState) bool) (authState, bool) {
	return readUntil(b, authScript, within, ok)
}

// locked reports whether the page shows the login form and no data.
func (s authState) locked() bool {
	return s.Login && !s.MainShown && s.Rows == 0 && s.Members == 0 && s.SignedIn == ""
}

// TestDashboardLoginAndShards: with auth enabled on a cluster of two shards,
// the dashboard opens on its login form and shows no data; a wrong password
// is refused on the form; signed in as root it shows the members, all up
// (the serving member probes the others with the page's token), with the
// leader the members name, and a row per shard whose leader is the one the members name, with
// term, commit and applied indexes; the sign-in survives a reload (the
// token is in the tab's sessionStorage); sign out locks the page again,
// clears its data and revokes the token.
func TestDashboardLoginAndShards(t *testing.T) {
	b := startBrowser(t)
	shots := screenshotDir(t)
	c := proccluster.Start(t, proccluster.Options{Nodes: 3, Shards: 2})
	leader := c.WaitLeader(30 * time.Second)
	defer func() {
		if t.Failed() {
			c.LogTails(40)
		}
	}()
	base := c.Members[leader].ClientURL
	putNode(t, base, keyPath, keyValue)
	call(t, base, "POST", "/v1/auth", "", `{"action":"user_add","user":"root","password":"`+rootPassword+`"}`, http.StatusOK)
	call(t, base, "POST", "/v1/auth", "", `{"action":"enable"}`, http.StatusOK)

	viewer := (leader + 1) % 3
	origin := c.Members[viewer].ClientURL
	b.navigate(t, origin+"/ui")
	if s, ok := waitAuth(b, firstLoadWithin, authState.locked); !ok {
		t.Fatalf("with auth enabled the page does not show only its login form within %v: %+v", firstLoadWithin, s)
	}
	b.screenshot(t, shots, "login-1-form")

	if _, err := eval[bool](b, signInScript("root", "wrong")); err != nil {
		t.Fatal(err)
	}
	if s, ok := waitAuth(b, firstLoadWithin, func(s authState) bool { return s.LoginError != "" }); !ok || !s.locked() {
		t.Fatalf("a wrong password: the page shows %+v; want the form's error and no data", s)
	}

	if _, err := eval[bool](b, signInScript("root", rootPassword)); err != nil {
		t.Fatal(err)
	}
	leaderName := c.Members[leader].Name
	s, ok := waitAuth(b, firstLoadWithin, func(s authState) bool {
		return s.SignedIn == "root" && s.MainShown && s.Members == 3 && s.MembersUp == 3 && s.Leader == leaderName && len(s.Shards) == 2
	})
	if !ok {
		t.Fatalf("signed in as root, the page does not show 3 members up, leader %s and 2 shards within %v: %+v", leaderName, firstLoadWithin, s)
	}
	token := s.Token
	shardLeaders := func() []string { return shardLeaderNames(t, origin, token) }
	if s, ok = waitAuth(b, firstLoadWithin, func(s authState) bool { return sameShardLeaders(s, shardLeaders()) }); !ok {
		t.Fatalf("the shard rows %+v do not name the shards' leaders %v within %v", s.Shards, shardLeaders(), firstLoadWithin)
	}
	for _, row := range s.Shards {
		if len(row.Cells) != 6 || row.Cells[2] == "0" || row.Cells[3] == "0" || row.Cells[4] == "0" {
			t.Fatalf("shard %s's row lacks its term, commit or applied index: %q", row.Shard, row.Cells)
		}
	}
	b.screenshot(t, shots, "login-2-signed-in-shards")

	b.navigate(t, origin+"/ui")
	if s, ok = waitAuth(b, firstLoadWithin, func(s authState) bool { return s.SignedIn == "root" && s.Members == 3 }); !ok {
		t.Fatalf("after a reload the page is not signed in with its data within %v: %+v", firstLoadWithin, s)
	}

	if _, err := eval[bool](b, `(() => { document.getElementById("logout").click(); return true; })()`); err != nil {
		t.Fatal(err)
	}
	if s, ok = waitAuth(b, firstLoadWithin, func(s authState) bool { return s.locked() && s.Token == "" }); !ok {
		t.Fatalf("after sign out the page does not show only its login form within %v: %+v", firstLoadWithin, s)
	}
	b.screenshot(t, shots, "login-3-signed-out")
	revoked := func() bool {
		status, _ := send(t, origin, "GET", "/v1/status", token, "")
		return status == http.StatusUnauthorized
	}
	deadline := time.Now().Add(10 * time.Second)
	for !revoked() {
		if time.Now().After(deadline) {
			t.Fatalf("the token the page signed out with still works")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if foreign := b.foreignRequests(origin); len(foreign) > 0 {
		t.Fatalf("the page fetched from origins other than %s: %v", origin, foreign)
	}
	if thrown := b.exceptionsThrown(); len(thrown) > 0 {
		t.Fatalf("the page threw JavaScript exceptions: %v", thrown)
	}
}

// shardLeaderNames returns, by shard, the name of the leader the member at
// base names (its /v1/status), "" where it knows none.
func shardLeaderNames(t *testing.T, base, token string) []string {
	t.Helper()
	var st api.Status
	_, body := send(t, base, "GET", "/v1/status", token, "")
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("status: %v: %s", err, body)
	}
	names := map[string]string{}
	for _, m := range st.Members {
		names[m.ID] = m.Name
	}
	out := make([]string, len(st.Shards))
	for i, sh := range st.Shards {
		out[i] = names[sh.LeaderID]
	}
	return out
}

// sameShardLeaders reports whether the page's shard rows name leaders, one
// per shard in order, and they are leaders.
func sameShardLeaders(s authState, leaders []string) bool {
	if len(s.Shards) != len(leaders) {
		return false
	}
	for i, row := range s.Shards {
		if leaders[i] == "" || row.Leader != leaders[i] || row.Shard != strings.TrimSpace(row.Cells[0]) {
			return false
		}
	}
	return true
}

// send makes one request with token (if any) and returns its status and body.
func send(t *testing.T, base, method, path, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, reply
}

// call is send that fails the test unless the status is want.
func call(t *testing.T, base, method, path, token, body string, want int) []byte {
	t.Helper()
	status, reply := send(t, base, method, path, token, body)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, reply)
	}
	return reply
}
