package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
)

// TestOutputShowsHandlesNotIDs (issue 11 item 5): latchctl prints a session
// id only to whoever creates or names the session (session create, session
// get ID); lock-status, election-status and get of an ephemeral node name
// the holder by its labelled session handle and never print its id.
func TestOutputShowsHandlesNotIDs(t *testing.T) {
	cluster, env := realCluster(t, 1)
	created := latchctl(t, env, "", "session", "create", "--timeout", "30s", "-o", "json")
	var session struct {
		SessionID     string `json:"session_id"`
		SessionHandle string `json:"session_handle"`
	}
	if err := json.Unmarshal([]byte(created.stdout), &session); err != nil || created.code != ExitOK {
		t.Fatalf("session create = %+v (%v)", created, err)
	}
	if want, err := api.SessionHandleOf(session.SessionID); err != nil || session.SessionHandle != want {
		t.Fatalf("session create = %+v: want session_handle %s (%v)", session, want, err)
	}
	if got := latchctl(t, env, "", "session", "get", session.SessionID); !strings.Contains(got.stdout, "(handle "+session.SessionHandle+")") {
		t.Fatalf("session get = %+v, want the handle labelled", got)
	}
	if got := latchctl(t, env, "", "put", "--ephemeral", "--session", session.SessionID, "/e", "x"); got.code != ExitOK {
		t.Fatalf("put --ephemeral = %+v", got)
	}
	got := latchctl(t, env, "", "get", "-o", "json", "/e")
	var node api.Node
	if err := json.Unmarshal([]byte(got.stdout), &node); err != nil || node.OwnerHandle != session.SessionHandle ||
		strings.Contains(got.stdout, session.SessionID) {
		t.Fatalf("get -o json of an ephemeral node = %+v (%v): want owner_handle %s and no id", got, err, session.SessionHandle)
	}

	loop := []string{"--", "sh", "-c", "trap 'exit 0' TERM; echo started; while :; do sleep 0.05; done"}
	for _, tt := range []struct {
		name, status, want string
		run                []string
	}{
		{"lock", "lock-status", "lock R held by session handle ", append([]string{"lock", "R"}, loop...)},
		{"election", "election-status", "db led by session handle ", append([]string{"elect", "db", "--value", "v"}, loop...)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := startLatchctl(env, tt.run...)
			defer func() { r.cancel(); r.wait(t) }()
			waitUntil(t, "the command to start", func() bool { return strings.Contains(r.stdout.String(), "started") })
			name := tt.run[1]
			text := latchctl(t, env, "", tt.status, name)
			at := strings.Index(text.stdout, tt.want)
			if text.code != ExitOK || at < 0 {
				t.Fatalf("%s = %+v, want %q", tt.status, text, tt.want)
			}
			handle := strings.Fields(text.stdout[at+len(tt.want):])[0]
			id, ok := cluster.SessionByHandle(0, handle)
			if !ok {
				t.Fatalf("%s names %q, the handle of no live session", tt.status, handle)
			}
			asJSON := latchctl(t, env, "", tt.status, "-o", "json", name)
			for _, out := range []string{text.stdout, asJSON.stdout} {
				if strings.Contains(out, id) || !strings.Contains(out, handle) {
					t.Fatalf("%s printed %q: want the handle %s and never the id %s", tt.status, out, handle, id)
				}
			}
		})
	}
}
