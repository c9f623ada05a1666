package client

import (
	"go/build"
	"strings"
	"testing"
)

const module = "github.com/latch-io/latch/"

// TestImportsStayPublic: the public client and its recipes import only the
// standard library and api, never anything under internal/; their tests
// may also import the test harnesses under internal/testkit (a real
// in-process cluster behind fault-injecting proxies), and nothing else
// internal.
func TestImportsStayPublic(t *testing.T) {
	for _, dir := range []string{".", "recipe"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imported := range pkg.Imports {
			if why := importRefused(imported, false); why != "" {
				t.Errorf("%s imports %s: %s", pkg.ImportPath, imported, why)
			}
		}
		for _, imported := range append(pkg.TestImports, pkg.XTestImports...) {
			if why := importRefused(imported, true); why != "" {
				t.Errorf("%s's tests import %s: %s", pkg.ImportPath, imported, why)
			}
		}
	}
}

// importRefused says why the client (or, when test is set, its tests) must
// not import imported, or returns "".
func importRefused(imported string, test bool) string {
	switch {
	case !strings.Contains(strings.SplitN(imported, "/", 2)[0], "."):
		return "" // the standard library
	case imported == module+"api", imported == module+"client" || strings.HasPrefix(imported, module+"client/"):
		return ""
	case test && strings.HasPrefix(imported, module+"internal/testkit/"):
		return ""
	case test:
		return "tests may import only the standard library, api, the client and internal/testkit"
	default:
		return "only the standard library and api are allowed"
	}
}

func TestImportRefusedCatchesPlanted(t *testing.T) {
	tests := []struct {
		name     string
		imported string
		test     bool
		refused  bool
	}{
		{"client imports api", module + "api", false, false},
		{"client imports net/http", "net/http", false, false},
		{"client imports testkit", module + "internal/testkit/faulthttp", false, true},
		{"client imports server", module + "internal/server", false, true},
		{"client imports a module", "go.etcd.io/raft/v3", false, true},
		{"test imports testkit", module + "internal/testkit/faulthttp", true, false},
		{"test imports server", module + "internal/server", true, true},
		{"test imports a module", "go.etcd.io/raft/v3", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := importRefused(tt.imported, tt.test) != ""; got != tt.refused {
				t.Fatalf("importRefused(%s, test=%v) refused=%v, want %v", tt.imported, tt.test, got, tt.refused)
			}
		})
	}
}
