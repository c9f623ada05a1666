package checker

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the checks' workloads (0: LATCH_TEST_SEED or the clock; printed)")

// latchctl is the binary built by TestMain, or "" with buildErr saying why not.
var (
	latchctl string
	buildErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "latchctl-build-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	latchctl, buildErr = buildLatchctl(dir)
	code := m.Run()
	proccluster.RemoveBuild()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildLatchctl(dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go tool to build latchctl: %w", err)
	}
	bin := filepath.Join(dir, "latchctl")
	out, err := exec.Command(goTool, "build", "-o", bin, "github.com/latch-io/latch/cmd/latchctl").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build latchctl: %w\n%s", err, out)
	}
	return bin, nil
}
