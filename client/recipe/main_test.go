package recipe

import (
	"os"
	"testing"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proccluster.RemoveBuild()
	os.Exit(code)
}
