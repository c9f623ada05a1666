// Package process tests latchd as real processes, through
// internal/testkit/proccluster: what only real processes show (kill -9, SIGSTOP,
// restarts from the data directory).
package process

import (
	"testing"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

func TestMain(m *testing.M) { proccluster.RunTests(m) }
