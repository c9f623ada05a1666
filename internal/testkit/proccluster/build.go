package proccluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// LatchdPackage is the import path Build compiles.
const LatchdPackage = "github.com/latch-io/latch/cmd/latchd"

var (
	buildOnce sync.Once
	buildPath string // the built binary, once built
	buildErr  error  // why the build failed
	buildDir  string // the directory holding buildPath
)

// BinaryEnv names an environment variable that, when set, gives the path
// of a latchd binary to use instead of building one.
const BinaryEnv = "LATCHD_BIN"

// Build compiles latchd once per test binary into a temporary directory and
// returns the binary's path (or returns $LATCHD_BIN when set). It skips the test when no go tool is found and
// fails it when the build fails. Call RemoveBuild from TestMain to delete
// the directory when the test binary ends.
func Build(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { buildPath, buildErr = build() })
	if buildErr == errNoGoTool {
		t.Skipf("proccluster: %v", buildErr)
	}
	if buildErr != nil {
		t.Fatalf("proccluster: %v", buildErr)
	}
	return buildPath
}

var errNoGoTool = fmt.Errorf("no go tool to build latchd")

func build() (string, error) {
	if bin := os.Getenv(BinaryEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s: %w", BinaryEnv, err)
		}
		return bin, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", errNoGoTool
	}
	buildDir, err = os.MkdirTemp("", "latchd-build-")
	if err != nil {
		return "", fmt.Errorf("make build directory: %w", err)
	}
	bin := filepath.Join(buildDir, "latchd")
	cmd := exec.Command(goTool, "build", "-o", bin, LatchdPackage)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build latchd: %w\n%s", err, out)
	}
	return bin, nil
}

// RunTests runs m's tests, removes what Build and BuildLatchctl made, and
// exits with the tests' code: a test package's whole TestMain.
func RunTests(m *testing.M) {
	code := m.Run()
	RemoveBuild()
	os.Exit(code)
}

// RemoveBuild deletes the directory of the binary Build made, if any. Call
// it from TestMain after m.Run (RunTests does).
func RemoveBuild() {
	for _, dir := range []string{buildDir, latchctlDir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
}

// LatchctlPackage is the import path BuildLatchctl compiles.
const LatchctlPackage = "github.com/latch-io/latch/cmd/latchctl"

var (
	latchctlOnce sync.Once
	latchctlPath string // the built binary, once built
	latchctlErr  error  // why the build failed
	latchctlDir  string // the directory holding latchctlPath
)

// BuildLatchctl compiles latchctl once per test binary, as Build does
// latchd, and returns the binary's path; RemoveBuild deletes it too.
func BuildLatchctl(t testing.TB) string {
	t.Helper()
	latchctlOnce.Do(func() {
		latchctlDir, latchctlErr = os.MkdirTemp("", "latchctl-build-")
		if latchctlErr != nil {
			return
		}
		latchctlPath = filepath.Join(latchctlDir, "latchctl")
		if out, err := exec.Command("go", "build", "-o", latchctlPath, LatchctlPackage).CombinedOutput(); err != nil {
			latchctlErr = fmt.Errorf("go build latchctl: %w\n%s", err, out)
		}
	})
	if latchctlErr != nil {
		t.Fatalf("proccluster: %v", latchctlErr)
	}
	return latchctlPath
}
