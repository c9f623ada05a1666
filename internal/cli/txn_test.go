package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
)

// TestTxnCommand: 'latchctl txn' from stdin, a file and --op flags; a
// refusal exits 3 or 2 naming the operation and changes nothing; usage
// mistakes exit 1 before anything is sent.
func TestTxnCommand(t *testing.T) {
	t.Parallel()
	_, env := newCluster(t, 1)
	file := filepath.Join(t.TempDir(), "ops.json")
	if err := os.WriteFile(file, []byte(`{"ops":[{"op":"set","path":"/acct/a","value":"5","version":1},{"op":"set","path":"/acct/b","value":"15","version":1}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"create from stdin", `[{"op":"create","path":"/acct/a","value":"10"},{"op":"create","path":"/acct/b","value":"10"}]`,
			[]string{"txn", "-"}, ExitOK, "create /acct/b version 1", ""},
		{"from a file", "", []string{"txn", file}, ExitOK, "set /acct/a version 2", ""},
		{"from flags", "", []string{"txn", "--op", "check:/acct/a@2", "--op", "create-sequential:/acct/log-=moved", "--op", "check:/acct/none@0"},
			ExitOK, "create /acct/log-", ""},
		{"refused at a stale version", "", []string{"txn", "--op", "set:/acct/b=0", "--op", "set:/acct/a@1=0"}, ExitPrecondition, "", "operation 1"},
		{"refused on a missing node", "", []string{"txn", "--op", "delete:/acct/none"}, ExitNotFound, "", "not_found"},
		{"json output", "", []string{"-o", "json", "txn", "--op", "check:/acct/b"}, ExitOK, `"results"`, ""},
		{"no operation", "", []string{"txn"}, ExitOther, "", "no operation"},
		{"file and flags", "", []string{"txn", file, "--op", "check:/a"}, ExitOther, "", "not both"},
		{"bad kind", "", []string{"txn", "--op", "rename:/a"}, ExitOther, "", "KIND"},
		{"bad version", "", []string{"txn", "--op", "check:/a@x"}, ExitOther, "", "not a number"},
		{"unknown field in the file", `[{"op":"check","path":"/a","ttl":1}]`, []string{"txn", "-"}, ExitOther, "", "unknown field"},
		{"ephemeral without session", "", []string{"txn", "--op", "create-ephemeral:/e"}, ExitOther, "", "WithSession"},
	}
	for _, st := range steps {
		got := latchctl(t, env, st.stdin, st.args...)
		if got.code != st.code || !strings.Contains(got.stdout, st.stdout) || !strings.Contains(got.stderr, st.stderr) {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				st.name, got.code, got.stdout, got.stderr, st.code, st.stdout, st.stderr)
		}
	}
	got := latchctl(t, env, "", "-o", "json", "get", "/acct/b")
	var node api.Node
	if err := json.Unmarshal([]byte(got.stdout), &node); err != nil || node.Value != "15" || node.Version != 2 {
		t.Fatalf("/acct/b after the refused transactions: %s (%v)", got.stdout, err)
	}
}
