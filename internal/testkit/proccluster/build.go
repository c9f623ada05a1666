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

// RemoveBuild deletes the directory of the binary Build made, if any. Call
// it from TestMain after m.Run.
func RemoveBuild() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}
