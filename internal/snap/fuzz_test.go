package snap

import (
	"bytes"
	"io"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

func encodeFile(t testing.TB, meta Meta, body []byte) []byte {
	header, err := encodeHeader(meta)
	if err != nil {
		t.Fatal(err)
	}
	writer := &checksumWriter{w: io.Discard}
	writer.Write(body)
	out := append(header, body...)
	return append(out, encodeTrailer(writer.length, writer.checksum)...)
}

// FuzzReadStream feeds arbitrary bytes to the snapshot reader: it must
// never panic, and a stream it accepts whole must re-encode to its bytes.
func FuzzReadStream(f *testing.F) {
	f.Add(encodeFile(f, Meta{Group: 1, Index: 5, Term: 2, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}, []byte("hello")))
	f.Add(encodeFile(f, Meta{Group: 2, Index: 9}, nil))
	f.Add(encodeFile(f, Meta{Group: 3, Index: 1}, bytes.Repeat([]byte{0xAB}, 70<<10)))
	f.Add([]byte(headerMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		meta, body, err := readStream(bytes.NewReader(data), "fuzz")
		if err != nil {
			return
		}
		content, err := io.ReadAll(body)
		if err != nil {
			return
		}
		// Re-encoding what was accepted must read back the same (the
		// conf state may have had a non-canonical protobuf encoding).
		again, body2, err := readStream(bytes.NewReader(encodeFile(t, meta, content)), "again")
		if err != nil {
			t.Fatalf("re-encoded stream refused: %v", err)
		}
		content2, err := io.ReadAll(body2)
		if err != nil || !metaEqual(again, meta) || !bytes.Equal(content, content2) {
			t.Fatalf("re-encoded stream differs: %v", err)
		}
	})
}
