package latency

import (
	"flag"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: from the clock)")

func TestBucketsCoverEveryValue(t *testing.T) {
	values := []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<40 + 12345, math.MaxUint64 >> 1, math.MaxUint64}
	for _, v := range values {
		i := bucketOf(v)
		if i < 0 || i >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d, out of range", v, i)
		}
		if upperBound(i) < v || (i > 0 && upperBound(i-1) >= v) {
			t.Fatalf("value %d in bucket %d whose range is (%d, %d]", v, i, upperBound(i-1), upperBound(i))
		}
	}
}

func TestQuantilesMatchSortedSamples(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	tests := []struct {
		name string
		gen  func() time.Duration
	}{
		{"uniform 0-10ms", func() time.Duration { return time.Duration(rng.Int64N(int64(10 * time.Millisecond))) }},
		{"log-normal around 1ms", func() time.Duration {
			return time.Duration(math.Exp(rng.NormFloat64()*1.5) * float64(time.Millisecond))
		}},
		{"tiny values", func() time.Duration { return time.Duration(rng.Int64N(200)) }},
		{"constant", func() time.Duration { return 1234567 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := []*Histogram{New(), New(), New()}
			var samples []time.Duration
			for i := 0; i < 30000; i++ {
				d := tt.gen()
				samples = append(samples, d)
				parts[i%3].Record(d)
			}
			h := New()
			for _, p := range parts {
				h.Merge(p)
			}
			sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
			if h.Count() != uint64(len(samples)) || h.Min() != samples[0] || h.Max() != samples[len(samples)-1] {
				t.Fatalf("count/min/max = %d/%v/%v, want %d/%v/%v", h.Count(), h.Min(), h.Max(), len(samples), samples[0], samples[len(samples)-1])
			}
			for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
				exact := samples[int(math.Ceil(q*float64(len(samples))))-1]
				got := h.Quantile(q)
				if got < exact || float64(got-exact) > float64(exact)/64+1 {
					t.Errorf("q%v = %v, exact %v: outside [exact, exact*(1+1/64)]", q, got, exact)
				}
			}
		})
	}
}

func TestEmpty(t *testing.T) {
	h := New()
	if h.Quantile(0.99) != 0 || h.Mean() != 0 || h.Min() != 0 || h.Max() != 0 {
		t.Fatal("an empty histogram reports non-zero values")
	}
}
