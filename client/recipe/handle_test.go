package recipe

import (
	"context"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// TestHoldersRecogniseThemselvesByHandle: reads name a lock's holder and an
// election's leader by session handle, which is the holder's
// Session.Handle, another session's differs, and neither is an id.
func TestHoldersRecogniseThemselvesByHandle(t *testing.T) {
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := e.session(t, 10*time.Second), e.session(t, 10*time.Second)
	if want, err := api.SessionHandleOf(a.ID()); err != nil || a.Handle() != want || a.Handle() == a.ID() || a.Handle() == b.Handle() {
		t.Fatalf("handles %s, %s of sessions %s, %s: want %s (%v), distinct from ids and each other", a.Handle(), b.Handle(), a.ID(), b.ID(), want, err)
	}
	if _, err := NewLock(a, "R").Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if holder := e.lockState(t, "R").Holder; holder == nil || holder.SessionHandle != a.Handle() {
		t.Fatalf("lock holder %+v, want session handle %s", holder, a.Handle())
	}
	el := NewElection(a, "db")
	if _, err := el.Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	leader, err := NewElection(b, "db").Leader(ctx)
	if err != nil || leader.SessionHandle != a.Handle() || leader.Value != "v" {
		t.Fatalf("leader %+v, %v; want session handle %s", leader, err, a.Handle())
	}
}
