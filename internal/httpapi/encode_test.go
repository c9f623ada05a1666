package httpapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"reflect"
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
			randomFilled[api.Node](t, rng),
			randomFilled[api.Written](t, rng),
			randomFilled[api.Deleted](t, rng),
			randomFilled[api.Lock](t, rng),
			randomFilled[api.Released](t, rng),
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

// randomFilled returns a T with every field random (zero now and then, so
// that omitempty fields are both left out and written): a field added to a
// reply type later is compared too, so a hand-written encoder that misses
// it fails TestAppendReplyMatchesEncodingJSON.
func randomFilled[T any](t *testing.T, rng *rand.Rand) T {
	var v T
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		if rng.IntN(4) == 0 {
			continue // left zero
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(randomString(rng))
		case reflect.Uint64:
			f.SetUint(randomUint(rng))
		case reflect.Int:
			f.SetInt(int64(rng.IntN(3) - 1))
		case reflect.Bool:
			f.SetBool(rng.IntN(2) == 0)
		default:
			t.Fatalf("randomFilled: field %s of %T has kind %v: teach the test to fill it", rv.Type().Field(i).Name, v, f.Kind())
		}
	}
	return v
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
