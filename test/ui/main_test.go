package ui_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proccluster.RemoveBuild()
	removeLatchctlBuild()
	os.Exit(code)
}

// latchctlPackage is what buildLatchctl compiles.
const latchctlPackage = "github.com/latch-io/latch/cmd/latchctl"

var (
	latchctlOnce sync.Once
	latchctlPath string // the built binary
	latchctlErr  error  // why building it failed
	latchctlDir  string // the directory holding latchctlPath
)

// buildLatchctl compiles latchctl once per test binary and returns its path.
func buildLatchctl(t *testing.T) string {
	t.Helper()
	latchctlOnce.Do(func() {
		latchctlDir, latchctlErr = os.MkdirTemp("", "latchctl-build-")
		if latchctlErr != nil {
			return
		}
		latchctlPath = filepath.Join(latchctlDir, "latchctl")
		out, err := exec.Command("go", "build", "-o", latchctlPath, latchctlPackage).CombinedOutput()
		if err != nil {
			latchctlErr = errors.New("go build latchctl: " + err.Error() + "\n" + string(out))
		}
	})
	if latchctlErr != nil {
		t.Fatalf("%v", latchctlErr)
	}
	return latchctlPath
}

func removeLatchctlBuild() {
	if latchctlDir != "" {
		os.RemoveAll(latchctlDir)
	}
}
