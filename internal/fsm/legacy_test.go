package fsm

import (
	"hash/crc64"
	"testing"

	"github.com/latch-io/latch/internal/command"
)

// version1Hash is the state hash the version-1 binary (before command
// format 2) reached on version1History, computed with that binary: the
// CRC-64 of its snapshot in format version 1, which toVersion1 rebuilds.
const version1Hash = 0x6d02eb4f2cb3a94b

// TestVersion1EntriesReplayIdentically checks that a log written by the
// version-1 binary replays to exactly the state that binary reached, and
// that a snapshot of it restores to the same state, so upgrading a cluster
// with existing data changes nothing already applied.
func TestVersion1EntriesReplayIdentically(t *testing.T) {
	h := newHarness(t)
	for _, c := range version1History() {
		encoded := c.Marshal()
		encoded[0] = command.FormatV1 // as the version-1 binary wrote it
		decoded, err := command.Unmarshal(encoded)
		if err != nil {
			t.Fatal(err)
		}
		h.apply(decoded)
	}
	if got := crc64.Checksum(toVersion1(t, snapshotBytes(t, h.f)), crc64Table); got != version1Hash {
		t.Fatalf("replayed version-1 history hashes to %#x, want %#x as the version-1 binary did", got, uint64(version1Hash))
	}
	if restored := restore(t, snapshotBytes(t, h.f)); restored.Hash() != h.f.Hash() {
		t.Fatalf("its snapshot restores to %#x, not %#x", restored.Hash(), h.f.Hash())
	}
	if _, err := h.f.Get("/q/a-0000000000"); err != nil {
		t.Errorf("version 1 restarted a recreated parent's counter at 0: %v", err)
	}
	if _, err := h.f.Session(1); err != nil {
		t.Errorf("version 1 session ids are the create entries' indexes: %v", err)
	}
}

// version1History is a history written by the version-1 binary that meets
// every rule version 2 changed: a parent deleted and made again, a
// sequential name taken by a plain node, a second enqueue with a new
// value, sessions without a proposer's id.
func version1History() []command.Command {
	return []command.Command{
		createSession(1000), createSession(2000),
		putSequential("/q/a-"), putSequential("/q/a-"), delRecursive("/q"), putSequential("/q/a-"),
		put("/c/n-0000000000", "plain"), putSequential("/c/n-"),
		enqueue("/locks/R/lock-", 1), withValue(enqueue("/locks/R/lock-", 1), "b"), enqueue("/locks/R/lock-", 2),
		put("/p", "v"), putSequential("/p/x-"), withSeq(putSequential("/p/x-"), 1, 1), withSeq(putSequential("/p/x-"), 1, 1),
		closeSession(2), createSession(3000),
	}
}
