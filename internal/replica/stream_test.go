package replica

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
)

// TestStreamProposesInTurnOrder: writes of one stream started in the
// reverse of their turns' order are proposed, stamped and applied in turn
// order; a turn lost (the test hook: it takes its seq and never reaches
// raft) makes the state machine refuse every later write of the stream.
func TestStreamProposesInTurnOrder(t *testing.T) {
	var (
		mu  sync.Mutex
		log []string
	)
	r := startSingle(t, &recorder{name: "l", mu: &mu, log: &log})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const session = 5
	if res, _, err := r.Propose(ctx, &command.Command{Op: command.OpSessionCreate, SessionID: session, TimeoutMs: 10_000}); err != nil || res.Err != nil {
		t.Fatalf("session: %v / %v", err, res.Err)
	}
	stream := NewStream(session, 77, r.Applied())
	const n, lost = 20, 14
	turns := make([]*Turn, n)
	for i := range turns {
		turns[i] = stream.Next()
	}
	turns[lost].LoseForTest()
	outcomes := make([]error, n)
	var wg sync.WaitGroup
	for i := n - 1; i >= 0; i-- { // the last turn starts first
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := &command.Command{Op: command.OpPut, Path: "/q/n-", Sequential: true, Value: []byte(fmt.Sprint(i)), SessionID: session}
			res, _, err := r.Propose(WithTurn(ctx, turns[i]), cmd)
			if err == nil {
				err = res.Err
			}
			outcomes[i] = err
		}()
	}
	wg.Wait()
	for i, err := range outcomes {
		if want := i < lost; (err == nil) != want {
			t.Errorf("write %d: %v (applied: want %v)", i, err, want)
		}
		if err != nil && api.CodeOf(err) != api.CodeUnavailable {
			t.Errorf("write %d refused %v, want unavailable", i, err)
		}
	}
	r.View(func(f *fsm.FSM) {
		names, err := f.Children("/q")
		if err != nil || len(names) != lost {
			t.Fatalf("children %v, %v; want %d", names, err, lost)
		}
		for i, name := range names {
			node, _ := f.Get("/q/" + name)
			if string(node.Value) != fmt.Sprint(i) {
				t.Errorf("%s holds %q, want %d: applied out of turn order", name, node.Value, i)
			}
		}
		if id, _, seq := f.StreamPosition(session); id != 77 || seq != lost {
			t.Errorf("stream position %d/%d, want 77/%d", id, seq, lost)
		}
	})
}
