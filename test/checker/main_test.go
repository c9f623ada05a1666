package checker

import (
	"flag"
	"os"
	"testing"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the checks' workloads (0: LATCH_TEST_SEED or the clock; printed)")

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	proccluster.RemoveBuild()
	os.Exit(code)
}
