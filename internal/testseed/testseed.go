// Package testseed picks and logs the seed of a randomized test, so that any
// failure can be replayed. For tests only.
package testseed

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Pick returns given if it is not zero, else the value of the environment
// variable env (if env is set and parses), else one drawn from the clock; it
// logs the choice with how to replay it (the package's -seed flag).
func Pick(t testing.TB, given uint64, env string) uint64 {
	seed := given
	if seed == 0 && env != "" {
		if v, err := strconv.ParseUint(os.Getenv(env), 10, 64); err == nil {
			seed = v
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed=%d)", seed, seed)
	return seed
}
