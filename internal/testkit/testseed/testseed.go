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
// variable env (if env is set), else one drawn from the clock; it logs the
// choice with how to replay it (the package's -seed flag). A value of env
// that is not a number fails the test rather than run an unasked-for seed.
func Pick(t testing.TB, given uint64, env string) uint64 {
	t.Helper()
	seed := given
	if value := os.Getenv(env); seed == 0 && env != "" && value != "" {
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", env, value, err)
		}
		seed = v
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed=%d)", seed, seed)
	return seed
}
