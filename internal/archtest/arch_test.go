// Package archtest holds the test that keeps latch's imports pointing one
// way, as docs/design.md lays the packages out.
package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/latch-io/latch/"

// layers lists the project's packages from the top down: a package may import
// only packages on a lower line. Test infrastructure sits on top.
var layers = [][]string{
	{"internal/testkit/chaos", "internal/testkit/faulthttp", "test/process", "test/membership", "test/compose", "test/recipes", "test/fanout", "internal/archtest"},
	{"internal/testkit/proccluster", "internal/testkit/testcluster", "internal/testkit/linearize"},
	{"internal/testkit/crashfs"},
	{"cmd/latchd", "cmd/latchctl"},
	{"internal/cli"},
	{"internal/loadgen"},
	{"internal/loadgen/latency"},
	{"client/recipe"},
	{"client"},
	{"fencing"},
	{"internal/httpapi"},
	{"internal/server"},
	{"internal/sessions", "internal/queues"}, // the features over a group's runtime
	{"internal/replica"},                     // one consensus group's runtime
	{"internal/raftnode"},
	{"internal/transport"},
	{"internal/wal"},
	{"internal/snap"},
	{"internal/watch"},
	{"internal/fsm"},
	{"internal/command"},
	{"api"},
	{"internal/vfs"},
	{"internal/testkit/testseed"},
	{"internal/buildinfo"},
	{"internal/clock"},
}

// forbidden lists imports a package must never have, whatever the layers say.
var forbidden = map[string][]string{
	"api":              {"*"}, // the standard library only
	"internal/clock":   {"*"},
	"internal/fsm":     {"net", "net/http", "os", "time", "math/rand", "go.etcd.io/raft"},
	"internal/command": {"net", "os", "go.etcd.io/raft"},
	"client":           {module + "internal/"},
	"client/recipe":    {module + "internal/"},
	"fencing":          {module + "internal/"},
}

func TestImportsPointDown(t *testing.T) {
	rank := map[string]int{}
	for i, layer := range layers {
		for _, p := range layer {
			rank[p] = i
		}
	}
	root := filepath.Join("..", "..")
	for p := range rank {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
			t.Errorf("archtest's layers name %s, which does not exist: %v", p, err)
		}
	}
	found := projectImports(t, root)
	for pkg := range forbidden {
		if _, ok := found[pkg]; !ok {
			t.Errorf("found no imports of %s: the walk from %s missed the packages it checks", pkg, root)
		}
	}
	for pkg, imports := range found {
		r, ok := rank[pkg]
		if !ok {
			t.Errorf("package %s is not placed in archtest's layers (ARCHITECTURE.md): add it", pkg)
			continue
		}
		for _, imp := range imports {
			checkForbidden(t, pkg, imp)
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			if dr, known := rank[dep]; known && dr <= r {
				t.Errorf("%s imports %s, which is not below it", pkg, dep)
			}
		}
	}
}

func checkForbidden(t *testing.T, pkg, imp string) {
	if why := forbiddenImport(pkg, imp); why != "" {
		t.Errorf("%s imports %s%s", pkg, imp, why)
	}
}

// forbiddenImport says why pkg must not import imp, or returns "".
func forbiddenImport(pkg, imp string) string {
	stdlib := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
	for _, bad := range forbidden[pkg] {
		switch {
		case bad == "*" && !stdlib:
			return ": it may import the standard library only"
		case bad != "*" && (imp == bad || strings.HasPrefix(imp, strings.TrimSuffix(bad, "/")+"/")):
			return ", which it must not"
		}
	}
	return ""
}

// TestForbiddenImportCatchesPlanted shows forbiddenImport refusing planted
// violations, so that TestImportsPointDown passing means something.
func TestForbiddenImportCatchesPlanted(t *testing.T) {
	tests := []struct {
		name, pkg, imp string
		refused        bool
	}{
		{"api imports a module", "api", "go.etcd.io/raft/v3", true},
		{"api imports the standard library", "api", "encoding/json", false},
		{"fsm imports net/http", "internal/fsm", "net/http", true},
		{"fsm imports time", "internal/fsm", "time", true},
		{"fsm imports math/rand/v2", "internal/fsm", "math/rand/v2", true},
		{"fsm imports raft", "internal/fsm", "go.etcd.io/raft/v3/raftpb", true},
		{"fsm imports net/netip, under net", "internal/fsm", "net/netip", true},
		{"fsm imports strings", "internal/fsm", "strings", false},
		{"client imports internal", "client", module + "internal/watch", true},
		{"client imports api", "client", module + "api", false},
		{"server has no list", "internal/server", "net/http", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := forbiddenImport(tt.pkg, tt.imp) != ""; got != tt.refused {
				t.Fatalf("forbiddenImport(%s, %s) refused=%v, want %v", tt.pkg, tt.imp, got, tt.refused)
			}
		})
	}
}

// projectImports maps each package directory (relative, slash-separated) to
// the imports of its non-test Go files.
func projectImports(t *testing.T, root string) map[string][]string {
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			out[pkg] = append(out[pkg], strings.Trim(imp.Path.Value, `"`))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
