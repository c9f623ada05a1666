package queues

import "testing"

// TestIsQueueNode: only ephemeral nodes named prefix+sequence hold or wait
// in a queue; anything else a directory may hold (data written before plain
// writes there were refused) is ignored, so it cannot wedge the queue.
func TestIsQueueNode(t *testing.T) {
	tests := []struct {
		name  string
		node  string
		owner uint64
		want  bool
	}{
		{"a queue node", "lock-0000000042", 7, true},
		{"a queue node past ten digits", "lock-12345678901", 7, true},
		{"a persistent node with a queue name", "lock-0000000000", 0, false},
		{"a stray name", "aaa", 7, false},
		{"another prefix", "candidate-0000000001", 7, false},
		{"too few digits", "lock-42", 7, false},
		{"not digits", "lock-00000000x1", 7, false},
		{"the bare prefix", "lock-", 7, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isQueueNode(tt.node, tt.owner, lockPrefix); got != tt.want {
				t.Errorf("isQueueNode(%q, %d) = %v, want %v", tt.node, tt.owner, got, tt.want)
			}
		})
	}
}
