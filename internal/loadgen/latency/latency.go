// Package latency records durations in a log-linear histogram (HDR style):
// constant memory, O(1) recording, and quantiles within 1/64 (about 1.6%)
// of the true value, exact below 128ns. It is what latchctl bench reports
// p50/p99/p99.9 from.
//
// A Histogram is not safe for concurrent use: give each goroutine its own
// and Merge them at the end.
package latency

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the precision: each power-of-two range is split into
// 2^(subBits-1) linear buckets.
const (
	subBits    = 7
	subCount   = 1 << subBits // values below this have a bucket each
	halfCount  = subCount / 2
	numBuckets = subCount + (64-subBits)*halfCount
)

// Histogram counts durations (in nanoseconds) by bucket.
type Histogram struct {
	counts [numBuckets]uint64
	total  uint64
	sum    float64 // nanoseconds, for the mean
	min    uint64
	max    uint64
}

// New returns an empty Histogram.
func New() *Histogram { return &Histogram{min: math.MaxUint64} }

// bucketOf returns the bucket index of v.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits // v>>shift is in [halfCount, subCount)
	return subCount + (shift-1)*halfCount + int(v>>shift) - halfCount
}

// upperBound returns the largest value that falls in bucket i.
func upperBound(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	shift := (i-subCount)/halfCount + 1
	mantissa := uint64((i-subCount)%halfCount + halfCount)
	return (mantissa+1)<<shift - 1
}

// Record adds one duration; negative ones count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	h.total++
	h.sum += float64(v)
	h.min = min(h.min, v)
	h.max = max(h.max, v)
}

// Merge adds every value recorded in other.
func (h *Histogram) Merge(other *Histogram) {
	for i, c := range other.counts {
		h.counts[i] += c
	}
	h.total += other.total
	h.sum += other.sum
	h.min = min(h.min, other.min)
	h.max = max(h.max, other.max)
}

// Count returns how many values were recorded.
func (h *Histogram) Count() uint64 { return h.total }

// Min and Max return the extreme values recorded (0 when empty).
func (h *Histogram) Min() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Max returns the largest value recorded (0 when empty).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the average value (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}

// Quantile returns the value at or below which a fraction q (0..1] of the
// recorded values lie: the upper bound of the bucket holding the
// ceil(q*count)-th smallest value, capped at the largest value recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(max(upperBound(i), h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
