package zkproto

import (
	"bytes"
	"testing"
)

// decodeAll decodes data as every record; none may panic, and each error
// must be a *DecodeError.
func decodeAll(t *testing.T, data []byte) {
	for _, tc := range roundTripCases {
		err := Decode(data, tc.fresh(), tc.name)
		if err == nil {
			continue
		}
		if _, ok := err.(*DecodeError); !ok {
			t.Fatalf("%s: error %T %v is not a *DecodeError", tc.name, err, err)
		}
	}
}

func addSeeds(f *testing.F) {
	for _, tc := range roundTripCases {
		f.Add(Encode(tc.rec))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff})
}

func FuzzDecodeRecords(f *testing.F) {
	addSeeds(f)
	f.Fuzz(decodeAll)
}

func FuzzDecodeConnectRequest(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var c ConnectRequest
		if err := Decode(data, &c, "ConnectRequest"); err != nil {
			return
		}
		if c.HasReadOnly && data[len(data)-1] > 1 {
			return // any non-zero readOnly byte reads as true and re-encodes as 1
		}
		// A decoded request re-encodes to the same bytes, in the form asked.
		if got := Encode(&c); !bytes.Equal(got, data) {
			t.Fatalf("re-encode %x, input %x", got, data)
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 2, 1, 2})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0x0f, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			rec, err := ReadFrame(r, 0)
			if err != nil {
				return
			}
			if len(rec) > MaxPacket {
				t.Fatalf("frame of %d bytes accepted", len(rec))
			}
			decodeAll(t, rec)
		}
	})
}
