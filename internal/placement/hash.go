package placement

// FNV-1a 64-bit parameters (the FNV specification; hash/fnv uses the same).
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// fnv1a returns the 64-bit FNV-1a hash of s's bytes.
func fnv1a(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// mix is the SplitMix64 finalizer: it spreads every input bit over every
// output bit, which FNV-1a does not do for a path's last bytes.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// jump is the jump consistent hash of Lamping and Veach ("A Fast, Minimal
// Memory, Consistent Hash Algorithm", 2014), as their reference code: key to
// a bucket in [0, buckets). buckets must be at least 1.
func jump(key uint64, buckets int) int {
	b, j := int64(-1), int64(0)
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}
