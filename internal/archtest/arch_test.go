// Package archtest holds the test that keeps latch's imports pointing one
// way, as ARCHITECTURE.md lays the packages out.
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
	{"cmd/latch-chaos", "internal/chaos", "test/process", "test/membership", "test/compose", "test/recipes", "test/fanout", "internal/archtest"},
	{"internal/proccluster", "internal/testcluster", "internal/linearize"},
	{"cmd/latchd", "cmd/latchctl"},
	{"internal/cli"},
	{"internal/cli/latency"},
	{"client/recipe"},
	{"client/clienttest"},
	{"client"},
	{"fencing"},
	{"internal/httpapi"},
	{"internal/server"},
	{"internal/raftnode"},
	{"internal/transport"},
	{"internal/wal"},
	{"internal/snap"},
	{"internal/watch"},
	{"internal/fsm"},
	{"internal/command"},
	{"api"},
	{"internal/clock"},
	{"internal/vfs"},
	{"internal/testseed"},
}

// forbidden lists imports a package must never have, whatever the layers say.
var forbidden = map[string][]string{
	"api":              {"*"}, // the standard library only
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
	for pkg, imports := range projectImports(t, root) {
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
	for _, bad := range forbidden[pkg] {
		stdlib := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
		switch {
		case bad == "*" && !stdlib:
			t.Errorf("%s imports %s: it may import the standard library only", pkg, imp)
		case bad != "*" && (imp == bad || strings.HasPrefix(imp, strings.TrimSuffix(bad, "/")+"/")):
			t.Errorf("%s imports %s, which it must not", pkg, imp)
		}
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
