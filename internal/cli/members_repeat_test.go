package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestMembersRepeatAndValidation: latchctl members remove of a member that
// was already removed exits 0, as docs/operations.md says; a repeated
// identical add exits 0; an add with unusable addresses exits 1 naming the
// field and adds nothing.
func TestMembersRepeatAndValidation(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	c.WaitLeader(10 * time.Second)
	env := map[string]string{EnvEndpoints: strings.Join(c.URLs(), ",")}
	run := func(want int, args ...string) result {
		t.Helper()
		got := latchctl(t, env, "", args...)
		if got.code != want {
			t.Fatalf("latchctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got.code, want, got.stdout, got.stderr)
		}
		return got
	}
	bad := run(ExitOther, "members", "add", "n8", "--peer-url", "notaurl", "--client-url", "alsonot")
	if !strings.Contains(bad.stderr, "peer_url") {
		t.Errorf("refusal of bad addresses does not name peer_url: %q", bad.stderr)
	}
	bad = run(ExitOther, "members", "add", "n8", "--peer-url", "127.0.0.1:2380", "--client-url", "alsonot")
	if !strings.Contains(bad.stderr, "client_url") {
		t.Errorf("refusal of a bad client URL does not name client_url: %q", bad.stderr)
	}
	if list := run(ExitOK, "members").stdout; strings.Contains(list, "n8") {
		t.Errorf("a refused add is listed:\n%s", list)
	}

	run(ExitOK, "members", "add", "n4", "--peer-url", c.PeerURL("n4"), "--learner")
	run(ExitOK, "members", "add", "n4", "--peer-url", c.PeerURL("n4"), "--learner")
	run(ExitPrecondition, "members", "add", "n4", "--peer-url", "elsewhere:2380", "--learner")
	run(ExitOK, "members", "remove", "n4")
	run(ExitOK, "members", "remove", "n4")
	run(ExitNotFound, "members", "remove", "n9")
}
