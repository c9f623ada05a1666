package httpapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

var encodeSeed = flag.Uint64("encode-seed", 0, "seed of TestAppendReplyMatchesEncodingJSON (0: from the clock)")

// stdlibReply is what encoding/json's Encoder writes for v.
func stdlibReply(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// randomString mixes what JSON escapes: quotes, backslashes, control
// bytes, HTML characters, multi-byte runes, U+2028/2029 and invalid UTF-8.
func randomString(rng *rand.Rand) string {
	pieces := []string{"a", "Z", "/", " ", "\"", "\\", "<", ">", "&", "\n", "\r", "\t", "\b", "\f",
		"\x00", "\x1f", "\x7f", "é", "日本", "\u2028", "\u2029", "\xff", "\xe2\x82", "😀", "\ufffd"}
	var b []byte
	for n := rng.IntN(12); n > 0; n-- {
		b = append(b, pieces[rng.IntN(len(pieces))]...)
	}
	return string(b)
}

func randomUint(rng *rand.Rand) uint64 {
	switch rng.IntN(3) {
	case 0:
		return 0
	case 1:
		return rng.Uint64N(1000)
	}
	return rng.Uint64()
}

// TestAppendReplyMatchesEncodingJSON: the hand-written encoders write the
// very bytes encoding/json writes, on random values of every type they
// encode. The seed is printed; -encode-seed replays it.
func TestAppendReplyMatchesEncodingJSON(t *testing.T) {
	seed := *encodeSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 2000; i++ {
		values := []any{
			api.Node{Path: randomString(rng), Value: randomString(rng), Version: randomUint(rng),
				CreatedIndex: randomUint(rng), ModifiedIndex: randomUint(rng), Ephemeral: rng.IntN(2) == 0,
				OwnerHandle: randomString(rng), ChildrenCount: rng.IntN(3) - 1, Index: randomUint(rng),
				ChildrenIndex: randomUint(rng)},
			api.Written{Path: randomString(rng), Version: randomUint(rng), CreatedIndex: randomUint(rng),
				ModifiedIndex: randomUint(rng), Index: randomUint(rng)},
			api.Deleted{Deleted: rng.IntN(2) == 0, Index: randomUint(rng)},
			api.Lock{Held: rng.IntN(2) == 0, SessionHandle: randomString(rng), FencingToken: randomUint(rng),
				Path: randomString(rng), Position: rng.IntN(3) - 1, Index: randomUint(rng)},
			api.Released{Released: rng.IntN(2) == 0, Index: randomUint(rng)},
		}
		for _, v := range values {
			got, ok := appendReply(nil, v)
			if !ok {
				t.Fatalf("%T not encoded by appendReply", v)
			}
			if want := stdlibReply(t, v); !bytes.Equal(got, want) {
				t.Fatalf("seed %d: %#v\n got %s\nwant %s", seed, v, got, want)
			}
		}
	}
}

// TestAppendReplyOtherTypes: a type without a hand-written encoder is left
// to encoding/json.
func TestAppendReplyOtherTypes(t *testing.T) {
	if b, ok := appendReply([]byte("x"), api.Children{}); ok || string(b) != "x" {
		t.Fatalf("appendReply(api.Children) = %q, %v; want it refused and the buffer unchanged", b, ok)
	}
}

func BenchmarkReplyNode(b *testing.B) {
	node := api.Node{Path: "/bench/key-0000123", Value: string(bytes.Repeat([]byte("v"), 256)), Version: 7,
		CreatedIndex: 1234, ModifiedIndex: 98765, Index: 98770}
	b.Run("appendReply", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf, _ = appendReply(buf[:0], node)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			_ = json.NewEncoder(&buf).Encode(node)
		}
	})
}
