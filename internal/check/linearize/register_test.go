package linearize

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/latch-io/latch/api"
)

func TestSettle(t *testing.T) {
	timeout := api.Errorf(api.CodeUnavailable, "timed out")
	tests := []struct {
		name     string
		in       Input
		node     api.Node
		err      error
		want     Output
		settled  Settlement
		recorded int // 1 settled or open, 0 dropped
		unknown  int
	}{
		{"read", get("/k"), api.Node{Value: "a", Version: 3}, nil, read("a", 3), Settled, 1, 0},
		{"read of no key", get("/k"), api.Node{}, api.Errorf(api.CodeNotFound, "no"), Output{}, Settled, 1, 0},
		{"failed read", get("/k"), api.Node{}, timeout, Output{}, Dropped, 0, 0},
		{"put", put("/k", "b"), api.Node{Version: 4}, nil, Output{Version: 4}, Settled, 1, 0},
		{"refused CAS", cas("/k", 2, "c"), api.Node{}, api.Errorf(api.CodePreconditionFailed, "no"), Output{Refused: true}, Settled, 1, 0},
		{"write never sent", put("/k", "d"), api.Node{}, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), Output{}, Dropped, 0, 0},
		{"write refused with 429", put("/k", "e"), api.Node{}, api.Errorf(api.CodeOverloaded, "busy"), Output{}, Dropped, 0, 0},
		{"write timed out", put("/k", "f"), api.Node{}, timeout, Output{}, LeftOpen, 1, 1},
		{"write failed otherwise", cas("/k", 0, "g"), api.Node{}, errors.New("reset"), Output{}, LeftOpen, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recorder := NewRecorder()
			out, settled := recorder.Begin(recorder.NewClient(), tt.in).Settle(tt.node, tt.err)
			if out != tt.want || settled != tt.settled {
				t.Fatalf("Settle = %+v, %v; want %+v, %v", out, settled, tt.want, tt.settled)
			}
			if recorded, unknown, _ := recorder.Counts(); recorded != tt.recorded || unknown != tt.unknown {
				t.Fatalf("recorded %d (%d unknown), want %d (%d unknown)", recorded, unknown, tt.recorded, tt.unknown)
			}
		})
	}
}

func TestObserve(t *testing.T) {
	tests := []struct {
		name string
		in   Input
		out  Output
		want uint64
	}{
		{"read", get("/k"), read("a", 3), 3},
		{"read of no key", get("/k"), Output{}, 0},
		{"put", put("/k", "b"), Output{Version: 4}, 4},
		{"refused CAS keeps the old version", cas("/k", 2, "c"), Output{Refused: true}, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			versions := map[string]uint64{"/k": 9}
			Observe(versions, tt.in, tt.out)
			if versions["/k"] != tt.want {
				t.Fatalf("version = %d, want %d", versions["/k"], tt.want)
			}
		})
	}
}
