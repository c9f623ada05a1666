package fsm

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// pathLessBytewise is pathLess's definition written another way: map each
// byte to a rank, '/' below every other byte, and compare the ranks
// lexicographically.
func pathLessBytewise(a, b string) bool {
	rank := func(s string) []uint16 {
		r := make([]uint16, len(s))
		for i := 0; i < len(s); i++ {
			if s[i] != '/' {
				r[i] = uint16(s[i]) + 1
			}
		}
		return r
	}
	return slices.Compare(rank(a), rank(b)) < 0
}

func TestPathLessOrder(t *testing.T) {
	for _, c := range []struct {
		a, b string
		less bool
	}{
		{"/", "/a", true},
		{"/a", "/a/b", true},
		{"/a/b", "/a-b", true}, // a subtree before a sibling that extends the name
		{"/a-b", "/a/b", false},
		{"/bench/set123/k00000001", "/bench/set123/k00000002", true},
		{"/bench/set123/k00000002", "/bench/set123/k00000001", false},
		{"/bench/set123/k00000001", "/bench/set123/k00000001", false},
		{"/bench/set123/k0000000", "/bench/set123/k00000001", true},
		{"/abcdefg/h", "/abcdefgh", true}, // the difference in a word's last byte, '/' first
		{"/abcdefgh/x", "/abcdefgh-x", true},
		{"/abcdefgh0123456/x", "/abcdefgh0123456x", true},
	} {
		if got := pathLess(c.a, c.b); got != c.less {
			t.Errorf("pathLess(%q, %q) = %v, want %v", c.a, c.b, got, c.less)
		}
	}
}

// TestPathLessMatchesBytewise compares pathLess with its definition over random paths that share long prefixes and differ at
// every offset, with '/' among the differing bytes.
func TestPathLessMatchesBytewise(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, seed))
	alphabet := "/-.0aZ~"
	randPath := func(prefix string) string {
		var b strings.Builder
		b.WriteString(prefix)
		for n := r.IntN(20); n > 0; n-- {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	prefixes := []string{"", "/", "/bench/", "/bench/set1764672000000000000/k", "/abcdefg"}
	for i := 0; i < 200000; i++ {
		p := prefixes[r.IntN(len(prefixes))]
		a, b := randPath(p), randPath(p)
		if r.IntN(4) == 0 {
			b = a[:r.IntN(len(a)+1)] + randPath("")
		}
		if got, want := pathLess(a, b), pathLessBytewise(a, b); got != want {
			t.Fatalf("pathLess(%q, %q) = %v, by rank %v", a, b, got, want)
		}
	}
}

func FuzzPathLess(f *testing.F) {
	f.Add("/bench/set1/k00000001", "/bench/set1/k00000002")
	f.Add("/abcdefgh/x", "/abcdefgh-x")
	f.Fuzz(func(t *testing.T, a, b string) {
		if got, want := pathLess(a, b), pathLessBytewise(a, b); got != want {
			t.Fatalf("pathLess(%q, %q) = %v, by rank %v", a, b, got, want)
		}
	})
}

// BenchmarkPathLess compares keys of one directory with a long shared
// prefix, as a B-tree search of a benchmark's keys does (a byte at a
// time, before the shared prefix was skipped by words: 12.6-23 ns).
func BenchmarkPathLess(b *testing.B) {
	keys := []string{"/bench/set1764672000000000000/k00001234", "/bench/set1764672000000000000/k00005678"}
	n := 0
	for i := 0; b.Loop(); i++ {
		if pathLess(keys[i&1], keys[(i+1)&1]) {
			n++
		}
	}
	if n == 0 {
		b.Fatal("no comparison was true")
	}
}
