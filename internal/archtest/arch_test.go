// Package archtest holds the tests that keep latch's imports as
// docs/design.md lays the packages out: each package names, in one
// allow-list, the packages of this module its code may import and, apart,
// what its tests may import besides; nothing else of the module is allowed.
package archtest

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/latch-io/latch/"

// testkit is the folder of the test harnesses: no product package's
// non-test code imports anything under it.
const testkit = "internal/testkit/"

// rule is what one package (a directory, relative to the module root) may
// import.
type rule struct {
	// imports are the module packages its non-test files may import.
	imports []string
	// tests are the module packages its _test.go files (in-package and
	// external _test package) may import besides imports and the package
	// itself.
	tests []string
	// stdlibOnly: none of its files, tests included, imports anything
	// outside the standard library and the module.
	stdlibOnly bool
	// never are imports outside the module its non-test files must not
	// have: a path, or a prefix of paths ending in "/" implied (net covers
	// net/http and net/netip).
	never []string
}

// testHarness are the in-process harnesses the client, recipe and CLI tests
// run against.
var testHarness = []string{testkit + "faulthttp", testkit + "testcluster"}

// allowed is the allow-list: every package of the module has a line, and
// its module imports are exactly those listed (each listed one is used).
var allowed = map[string]rule{
	// The base: imports nothing of latch.
	"internal/clock":     {stdlibOnly: true},
	"internal/buildinfo": {},
	"internal/vfs":       {},
	// Client and peer sockets read and written with fewer system calls.
	"internal/sockio": {stdlibOnly: true},
	// A measuring tool: the write pipeline's timeline (build tag latchtimeline).
	"internal/timeline":        {stdlibOnly: true},
	"internal/timeline/report": {imports: []string{"internal/timeline"}, stdlibOnly: true},
	"api":                      {stdlibOnly: true},
	// Where a path lives in a sharded cluster: a pure function.
	"internal/placement": {tests: []string{"api", testkit + "testseed"}, stdlibOnly: true, never: []string{"net", "os", "time", "math/rand"}},

	// State.
	"internal/command": {never: []string{"net", "os", "go.etcd.io/raft"}},
	"internal/fsm": {
		imports: []string{"api", "internal/command", "internal/placement"},
		tests:   []string{testkit + "testseed"},
		never:   []string{"net", "os", "time", "math/rand", "go.etcd.io/raft"},
	},
	"internal/watch": {imports: []string{"api", "internal/clock", "internal/fsm"}, tests: []string{testkit + "testseed"}},
	// The backup file: a format over the state machine's snapshot encoding.
	"internal/backup": {
		imports: []string{"internal/fsm"},
		tests:   []string{"internal/command", "internal/placement", testkit + "testseed"},
		never:   []string{"net", "go.etcd.io/raft"},
	},

	// Storage and network.
	"internal/snap":      {imports: []string{"internal/vfs"}, tests: []string{testkit + "testseed"}},
	"internal/wal":       {imports: []string{"internal/vfs"}, tests: []string{testkit + "testseed"}},
	"internal/transport": {imports: []string{"internal/sockio", "internal/timeline"}, tests: []string{"internal/tlsconfig", testkit + "freeport", testkit + "testcerts"}},
	// The TLS configs of every port, reloaded from files.
	"internal/tlsconfig": {tests: []string{testkit + "testcerts"}, stdlibOnly: true},
	// The ZooKeeper wire codec: bytes only.
	"internal/zkproto": {stdlibOnly: true},

	// One group's raft node and runtime.
	"internal/raftnode": {
		imports: []string{"internal/clock", "internal/snap", "internal/timeline", "internal/transport", "internal/wal"},
		tests:   []string{"internal/vfs", testkit + "testseed"},
	},
	"internal/replica": {
		imports: []string{"api", "internal/clock", "internal/command", "internal/fsm", "internal/raftnode", "internal/snap", "internal/timeline"},
		tests:   []string{"internal/transport", "internal/vfs", "internal/wal"},
	},

	// The features over a group's runtime.
	"internal/sessions": {
		imports: []string{"api", "internal/clock", "internal/command", "internal/fsm", "internal/replica", "internal/transport"},
	},
	"internal/queues": {imports: []string{"api", "internal/command", "internal/fsm", "internal/replica"}},

	// The server process and its wire: httpapi sees the server's own
	// request and reply types, never a command or the watch registry.
	"internal/server": {imports: []string{
		"api", "internal/backup", "internal/clock", "internal/command", "internal/fsm", "internal/placement", "internal/queues", "internal/raftnode",
		"internal/replica", "internal/sessions", "internal/snap", "internal/transport", "internal/vfs",
		"internal/wal", "internal/watch",
	}},
	"internal/httpapi": {imports: []string{"api", "internal/server", "internal/sockio", "internal/tlsconfig", "internal/ui"}, tests: []string{"internal/clock", testkit + "testcluster", testkit + "testcerts"}},
	// The dashboard's embedded assets and their handler.
	"internal/ui": {stdlibOnly: true},
	// The ZooKeeper-protocol listener: the server's API over zkproto's codec.
	"internal/zkserver": {
		imports: []string{"api", "internal/server", "internal/sockio", "internal/timeline", "internal/tlsconfig", "internal/zkproto"},
		tests:   []string{"internal/clock", "internal/placement", testkit + "freeport", testkit + "testcluster", testkit + "proccluster", testkit + "testcerts"},
	},

	// The public Go API: nothing internal; its tests run against the
	// in-process harnesses.
	"fencing":       {imports: []string{"api"}},
	"client":        {imports: []string{"api"}, tests: append(testHarness, testkit+"testcerts")},
	"client/recipe": {imports: []string{"api", "client"}, tests: append([]string{testkit + "proccluster"}, testHarness...)},

	// The CLI and the binaries.
	"internal/loadgen/latency": {},
	"internal/loadgen":         {imports: []string{"api", "client", "client/recipe", "internal/loadgen/latency"}},
	// The safety checker latchctl check runs (and the fault suite with it):
	// workloads and their checkers over the HTTP API, and Porcupine's model.
	"internal/check/linearize": {imports: []string{"api"}},
	"internal/check":           {imports: []string{"api", "fencing", "internal/check/linearize", "internal/clock"}},
	"internal/cli": {
		imports: []string{"api", "client", "client/recipe", "internal/backup", "internal/buildinfo", "internal/check", "internal/loadgen"},
		tests:   append(testHarness, testkit+"testcerts"),
	},
	"cmd/latchctl": {imports: []string{"internal/cli"}},
	"cmd/latchd":   {imports: []string{"api", "internal/buildinfo", "internal/clock", "internal/httpapi", "internal/placement", "internal/server", "internal/timeline", "internal/tlsconfig", "internal/vfs", "internal/zkserver"}, tests: []string{testkit + "testcluster"}},

	// The test harnesses.
	testkit + "testseed":  {stdlibOnly: true},
	testkit + "testcerts": {stdlibOnly: true},
	testkit + "freeport":  {stdlibOnly: true},
	testkit + "crashfs": {
		imports: []string{"internal/vfs"},
		tests:   []string{"internal/wal", testkit + "testseed"},
	},
	testkit + "testcluster": {
		imports: []string{"api", "internal/clock", "internal/httpapi", "internal/server", "internal/transport", "internal/vfs", testkit + "freeport"},
		tests:   []string{"client", "client/recipe", "internal/check/linearize", "internal/placement", testkit + "testseed"},
	},
	testkit + "proccluster": {
		imports: []string{"api", "internal/vfs", testkit + "crashfs", testkit + "freeport", testkit + "testcerts"},
		tests:   []string{testkit + "testcluster", testkit + "testseed"},
	},
	testkit + "faulthttp": {imports: []string{"api", testkit + "testcluster"}},
	testkit + "chaos": {
		imports: []string{"api", "client", "client/recipe", "fencing", "internal/check", "internal/clock", "internal/placement", testkit + "proccluster", testkit + "testcerts"},
	},

	// The system tests (test files only) and this check.
	"test/backup":       {tests: []string{"api", "client", "internal/cli", testkit + "proccluster"}},
	"test/cache":        {tests: []string{"api", "client", testkit + "proccluster", testkit + "testseed"}},
	"test/checker":      {tests: []string{"api", testkit + "proccluster", testkit + "testseed"}},
	"test/compose":      {tests: []string{"api", "client", testkit + "freeport", testkit + "testcluster"}},
	"test/fanout":       {tests: []string{"api", testkit + "proccluster", testkit + "testcluster"}},
	"test/membership":   {tests: []string{"api", "client", "internal/check/linearize", testkit + "freeport", testkit + "proccluster", testkit + "testcluster"}},
	"test/process":      {tests: []string{"api", "client", "internal/placement", "internal/server", "internal/transport", testkit + "proccluster", testkit + "testcerts", testkit + "testcluster"}},
	"test/ui":           {tests: []string{"api", testkit + "proccluster"}},
	"test/recipes":      {tests: []string{"api", "client", "client/recipe", "fencing", testkit + "proccluster", testkit + "testcluster"}},
	"internal/archtest": {stdlibOnly: true},
}

// pkgImports are the imports of one package directory's Go files, every
// build tag included.
type pkgImports struct {
	code  []string // of its non-test files
	tests []string // of its _test.go files, in-package and external
}

// TestImportsAllowed checks every package's imports, its tests' included,
// against its line in allowed.
func TestImportsAllowed(t *testing.T) {
	root := filepath.Join("..", "..")
	found := projectImports(t, root)
	for pkg := range allowed {
		if _, ok := found[pkg]; !ok {
			t.Errorf("archtest's allowed names %s, which has no Go files under %s: remove its line", pkg, root)
		}
	}
	for _, pkg := range sortedKeys(found) {
		for _, problem := range check(pkg, found[pkg]) {
			t.Error(problem)
		}
	}
}

// TestAllowListShape: the allow-list of non-test imports has no cycle, so
// the packages stay in layers whatever the compiler would accept, and no
// product package's line lets its code import a test harness.
func TestAllowListShape(t *testing.T) {
	if cycle := findCycle(allowed); cycle != nil {
		t.Errorf("archtest's allowed lets imports go round: %s", strings.Join(cycle, " -> "))
	}
	for _, pkg := range sortedKeys(allowed) {
		for _, dep := range allowed[pkg].imports {
			if product(pkg) && strings.HasPrefix(dep, testkit) {
				t.Errorf("archtest's allowed lets product package %s import %s: only tests may use %s", pkg, dep, testkit)
			}
		}
	}
}

// check returns what is wrong with the imports of pkg, one sentence each.
func check(pkg string, found pkgImports) []string {
	r, ok := allowed[pkg]
	if !ok {
		return []string{fmt.Sprintf("package %s has no line in archtest's allowed (internal/archtest/arch_test.go): "+
			"add one listing the module packages its code and its tests may import", pkg)}
	}
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	used := map[string]bool{}
	for _, imp := range found.code {
		dep, ours := strings.CutPrefix(imp, module)
		switch {
		case ours && product(pkg) && strings.HasPrefix(dep, testkit):
			report("%s imports %s: no product package's non-test code imports the test harnesses under %s", pkg, dep, testkit)
		case ours && !slices.Contains(r.imports, dep):
			report("%s imports %s, which archtest's allowed does not list for it", pkg, dep)
		case ours:
			used[dep] = true
		default:
			if why := externalRefused(r, imp, false); why != "" {
				report("%s imports %s%s", pkg, imp, why)
			}
		}
	}
	for _, imp := range found.tests {
		dep, ours := strings.CutPrefix(imp, module)
		switch {
		case ours && dep == pkg:
		case ours && slices.Contains(r.imports, dep):
		case ours && !slices.Contains(r.tests, dep):
			report("tests of %s import %s, which archtest's allowed does not list for them", pkg, dep)
		case ours:
			used["test:"+dep] = true
		default:
			if why := externalRefused(r, imp, true); why != "" {
				report("tests of %s import %s%s", pkg, imp, why)
			}
		}
	}
	for _, dep := range r.imports {
		if !used[dep] {
			report("archtest's allowed lets %s import %s, which its code does not: remove it", pkg, dep)
		}
	}
	for _, dep := range r.tests {
		if !used["test:"+dep] {
			report("archtest's allowed lets the tests of %s import %s, which they do not (or its code already does): remove it", pkg, dep)
		}
	}
	return problems
}

// product reports whether pkg is part of what ships, as opposed to the
// harnesses, the system tests and this check.
func product(pkg string) bool {
	return !strings.HasPrefix(pkg, testkit) && !strings.HasPrefix(pkg, "test/") && pkg != "internal/archtest"
}

// externalRefused says why r refuses imp, an import from outside the
// module, or returns "".
func externalRefused(r rule, imp string, inTest bool) string {
	stdlib := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
	if r.stdlibOnly && !stdlib {
		return ": it may import the standard library only"
	}
	if inTest {
		return ""
	}
	for _, bad := range r.never {
		if imp == bad || strings.HasPrefix(imp, bad+"/") {
			return ", which it must not"
		}
	}
	return ""
}

// findCycle returns a cycle among the non-test allow-lists, or nil.
func findCycle(rules map[string]rule) []string {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(string) []string
	visit = func(p string) []string {
		switch state[p] {
		case onPath:
			i := slices.Index(path, p)
			return append(slices.Clone(path[i:]), p)
		case done:
			return nil
		}
		state[p] = onPath
		path = append(path, p)
		for _, dep := range rules[p].imports {
			if c := visit(dep); c != nil {
				return c
			}
		}
		path = path[:len(path)-1]
		state[p] = done
		return nil
	}
	for _, p := range sortedKeys(rules) {
		if c := visit(p); c != nil {
			return c
		}
	}
	return nil
}

// httpapiImports are the module imports of httpapi's code as they are.
func httpapiImports() []string {
	return []string{module + "api", module + "internal/server", module + "internal/sockio", module + "internal/tlsconfig", module + "internal/ui"}
}

// httpapiTestImports are the module imports of httpapi's tests as they are.
func httpapiTestImports() []string {
	return []string{module + "internal/clock", module + "internal/testkit/testcluster", module + "internal/testkit/testcerts"}
}

// TestCheckCatchesPlanted shows check and findCycle refusing planted
// violations, so that TestImportsAllowed and TestAllowListShape passing
// means something.
func TestCheckCatchesPlanted(t *testing.T) {
	tests := []struct {
		name  string
		pkg   string
		found pkgImports
		want  string // a part of the one problem expected, or "" for none
	}{
		{"httpapi imports command", "internal/httpapi",
			pkgImports{code: append(httpapiImports(), module+"internal/command"), tests: httpapiTestImports()},
			"imports internal/command, which archtest's allowed does not list"},
		{"httpapi's tests import watch", "internal/httpapi",
			pkgImports{code: httpapiImports(), tests: append(httpapiTestImports(), module+"internal/watch")},
			"tests of internal/httpapi import internal/watch"},
		{"httpapi as it is", "internal/httpapi",
			pkgImports{code: append([]string{"net/http"}, httpapiImports()...), tests: append(httpapiTestImports(), module+"internal/httpapi")},
			""},
		{"client imports internal", "client",
			pkgImports{code: []string{module + "api", module + "internal/watch"}, tests: append(testHarnessImports(), module+testkit+"testcerts")},
			"client imports internal/watch"},
		{"client's tests import the server", "client",
			pkgImports{code: []string{module + "api"}, tests: append(testHarnessImports(), module+testkit+"testcerts", module+"internal/server")},
			"tests of client import internal/server"},
		{"product code imports a harness", "internal/fsm",
			pkgImports{code: []string{module + "api", module + "internal/command", module + "internal/placement", module + "internal/testkit/testseed"}, tests: []string{module + "internal/testkit/testseed"}},
			"no product package's non-test code imports the test harnesses"},
		{"unlisted package", "internal/newthing", pkgImports{}, "has no line in archtest's allowed"},
		{"listed import unused", "internal/queues",
			pkgImports{code: []string{module + "api", module + "internal/command", module + "internal/fsm"}},
			"lets internal/queues import internal/replica, which its code does not"},
		{"api imports a module", "api", pkgImports{code: []string{"go.etcd.io/raft/v3"}}, "standard library only"},
		{"api's tests import a module", "api", pkgImports{tests: []string{"github.com/google/go-cmp/cmp"}}, "standard library only"},
		{"clock imports a module", "internal/clock", pkgImports{code: []string{"golang.org/x/time/rate"}}, "standard library only"},
		{"fsm imports net/netip, under net", "internal/fsm",
			pkgImports{code: []string{module + "api", module + "internal/command", module + "internal/placement", "net/netip"}, tests: []string{module + "internal/testkit/testseed"}},
			"imports net/netip, which it must not"},
		{"fsm imports math/rand/v2", "internal/fsm",
			pkgImports{code: []string{module + "api", module + "internal/command", module + "internal/placement", "math/rand/v2"}, tests: []string{module + "internal/testkit/testseed"}},
			"imports math/rand/v2, which it must not"},
		{"fsm imports raft", "internal/fsm",
			pkgImports{code: []string{module + "api", module + "internal/command", module + "internal/placement", "go.etcd.io/raft/v3/raftpb"}, tests: []string{module + "internal/testkit/testseed"}},
			"imports go.etcd.io/raft/v3/raftpb, which it must not"},
		{"fsm's tests may use time", "internal/fsm",
			pkgImports{code: []string{module + "api", module + "internal/command", module + "internal/placement", "strings"}, tests: []string{"time", module + "internal/testkit/testseed"}},
			""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := check(tt.pkg, tt.found)
			switch {
			case tt.want == "" && len(problems) > 0:
				t.Fatalf("check(%s) = %q, want no problem", tt.pkg, problems)
			case tt.want != "" && (len(problems) != 1 || !strings.Contains(problems[0], tt.want)):
				t.Fatalf("check(%s) = %q, want one problem containing %q", tt.pkg, problems, tt.want)
			}
		})
	}
	t.Run("a cycle", func(t *testing.T) {
		rules := map[string]rule{"a": {imports: []string{"b"}}, "b": {imports: []string{"c"}}, "c": {imports: []string{"a"}}}
		if got := findCycle(rules); len(got) != 4 || got[0] != got[3] {
			t.Fatalf("findCycle = %v, want a cycle through a, b and c", got)
		}
	})
}

func testHarnessImports() []string {
	var out []string
	for _, p := range testHarness {
		out = append(out, module+p)
	}
	return out
}

// projectImports maps each package directory (relative, slash-separated) to
// the imports of its Go files, non-test and test apart.
func projectImports(t *testing.T, root string) map[string]pkgImports {
	out := map[string]pkgImports{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		imps := out[pkg]
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if strings.HasSuffix(path, "_test.go") {
				imps.tests = append(imps.tests, p)
			} else {
				imps.code = append(imps.code, p)
			}
		}
		out[pkg] = imps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
