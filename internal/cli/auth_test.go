package cli

import (
	"strings"
	"testing"
)

// TestAuthCommands sets up users and roles with latchctl, enables auth, logs
// in, and checks what each token may do, with the exit codes of a refusal.
func TestAuthCommands(t *testing.T) {
	t.Parallel()
	_, env := newCluster(t, 1)
	steps := []struct {
		stdin string
		args  []string
		code  int
	}{
		{"", []string{"auth", "enable"}, ExitPrecondition}, // no root yet
		{"root-pw\n", []string{"user", "add", "root"}, ExitOK},
		{"", []string{"role", "add", "app"}, ExitOK},
		{"", []string{"role", "grant", "app", "write", "/app"}, ExitOK},
		{"", []string{"role", "grant", "app", "bogus", "/app"}, ExitOther},
		{"", []string{"user", "add", "deploy", "--password", "deploy-pw"}, ExitOK},
		{"", []string{"user", "grant", "deploy", "app"}, ExitOK},
		{"", []string{"user", "add", "cert-client", "--no-password"}, ExitOK},
		{"", []string{"put", "/app/x", "v"}, ExitOK},
		{"", []string{"auth", "enable"}, ExitOK},
		{"", []string{"get", "/app/x"}, ExitDenied}, // no token now
		{"", []string{"auth", "status"}, ExitDenied},
		{"wrong\n", []string{"login", "deploy"}, ExitDenied},
	}
	for _, s := range steps {
		if r := latchctl(t, env, s.stdin, s.args...); r.code != s.code {
			t.Fatalf("latchctl %v: exit %d, want %d\nstdout %s\nstderr %s", s.args, r.code, s.code, r.stdout, r.stderr)
		}
	}
	login := func(user, password string) map[string]string {
		r := latchctl(t, env, password+"\n", "login", user)
		if r.code != ExitOK {
			t.Fatalf("login %s: exit %d %s", user, r.code, r.stderr)
		}
		withToken := map[string]string{EnvToken: strings.TrimSpace(r.stdout)}
		for k, v := range env {
			withToken[k] = v
		}
		return withToken
	}
	deploy, root := login("deploy", "deploy-pw"), login("root", "root-pw")
	checks := []struct {
		env  map[string]string
		args []string
		code int
		out  string
	}{
		{deploy, []string{"get", "/app/x"}, ExitOK, "v"},
		{deploy, []string{"put", "/app/y", "w"}, ExitOK, "version 1"},
		{deploy, []string{"put", "/other", "w"}, ExitDenied, ""},
		{deploy, []string{"auth", "status"}, ExitDenied, ""},
		{root, []string{"auth", "status"}, ExitOK, "auth enabled: true"},
		{root, []string{"user", "list"}, ExitOK, "deploy"},
		{root, []string{"role", "list"}, ExitOK, "write:/app"},
		{root, []string{"user", "delete", "root"}, ExitPrecondition, ""},
		{root, []string{"quota", "set", "/app", "--max-nodes", "3"}, ExitOK, ""},
		{deploy, []string{"put", "/app/z", "w"}, ExitOther, ""}, // /app, /app/x, /app/y: quota_exceeded
		{root, []string{"quota", "list"}, ExitOK, "3/3"},
		{root, []string{"quota", "clear", "/app"}, ExitOK, ""},
		{root, []string{"user", "revoke", "deploy", "app"}, ExitOK, ""},
		{deploy, []string{"get", "/app/x"}, ExitDenied, ""},
		{root, []string{"auth", "disable"}, ExitOK, ""},
		{env, []string{"get", "/app/x"}, ExitOK, "v"},
	}
	for _, c := range checks {
		r := latchctl(t, c.env, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stdout, c.out) {
			t.Errorf("latchctl %v: exit %d (want %d), stdout %q (want %q), stderr %s", c.args, r.code, c.code, r.stdout, c.out, r.stderr)
		}
	}
}
