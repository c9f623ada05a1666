package recipe

import (
	"testing"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

func TestMain(m *testing.M) { proccluster.RunTests(m) }
