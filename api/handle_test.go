package api

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
)

func TestSessionHandle(t *testing.T) {
	tests := []struct {
		name string
		id   uint64
	}{
		{"one", 1},
		{"small", 0x17},
		{"random-looking", 0x9c3f5e2a7b1d0864},
		{"max", ^uint64(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in [8]byte
			binary.BigEndian.PutUint64(in[:], tt.id)
			sum := sha256.Sum256(append([]byte("latch/session-handle/v1\x00"), in[:]...))
			want := binary.BigEndian.Uint64(sum[:8])
			if got := SessionHandle(tt.id); got != want {
				t.Fatalf("SessionHandle(%#x) = %#x, want %#x", tt.id, got, want)
			}
			if SessionHandle(tt.id) == tt.id {
				t.Fatalf("handle of %#x is the id itself", tt.id)
			}
			formatted, err := SessionHandleOf(FormatID(tt.id))
			if err != nil || formatted != FormatID(want) || formatted != FormatSessionHandle(tt.id) {
				t.Fatalf("SessionHandleOf(%s) = %q, %v; want %s", FormatID(tt.id), formatted, err, FormatID(want))
			}
		})
	}
}

func TestSessionHandleDistinct(t *testing.T) {
	seen := map[uint64]uint64{}
	for id := uint64(1); id <= 10000; id++ {
		h := SessionHandle(id)
		if other, dup := seen[h]; dup {
			t.Fatalf("ids %#x and %#x share handle %#x", other, id, h)
		}
		seen[h] = id
	}
}

func TestSessionHandleOfMalformed(t *testing.T) {
	if _, err := SessionHandleOf("nope"); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("SessionHandleOf(nope) = %v, want invalid_argument", err)
	}
}
