package sessions

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/transport"
)

// fakeReplica is the runtime a Liveness sees, with its state, leader and
// term set by the test; it records proposals and applies nothing.
type fakeReplica struct {
	mu       sync.Mutex
	leader   uint64
	term     uint64
	lastTick time.Time
	fsm      *fsm.FSM
	index    uint64
	proposed []command.Command
	// readIndex, if set, answers ReadIndex (a leadership check).
	readIndex func(context.Context) (uint64, error)
}

func (r *fakeReplica) Leader() uint64 { r.mu.Lock(); defer r.mu.Unlock(); return r.leader }
func (r *fakeReplica) Term() uint64   { r.mu.Lock(); defer r.mu.Unlock(); return r.term }
func (r *fakeReplica) LastTick() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastTick
}
func (r *fakeReplica) Propose(_ context.Context, cmd *command.Command) (fsm.Result, uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.index++
	r.proposed = append(r.proposed, *cmd)
	return fsm.Result{}, r.index, nil
}
func (r *fakeReplica) ReadIndex(ctx context.Context) (uint64, error) {
	if r.readIndex != nil {
		return r.readIndex(ctx)
	}
	return r.index, nil
}
func (r *fakeReplica) Barrier(context.Context, string, uint64) error { return nil }
func (r *fakeReplica) Unavailable(format string, args ...any) error {
	return api.Errorf(api.CodeUnavailable, format, args...)
}
func (r *fakeReplica) View(fn func(f *fsm.FSM)) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r.fsm)
	return r.fsm.Applied()
}

func (r *fakeReplica) set(leader, term uint64) {
	r.mu.Lock()
	r.leader, r.term = leader, term
	r.mu.Unlock()
}

func (r *fakeReplica) expiries() [][]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]uint64
	for _, c := range r.proposed {
		if c.Op == command.OpSessionExpire {
			out = append(out, slices.Clone(c.Sessions))
		}
	}
	return out
}

// fakePeers records the peer messages sent.
type fakePeers struct {
	mu   sync.Mutex
	sent []sentMessage
}

type sentMessage struct {
	to uint64
	m  transport.PeerMessage
}

func (p *fakePeers) SendPeer(to uint64, m transport.PeerMessage) {
	p.mu.Lock()
	p.sent = append(p.sent, sentMessage{to, m})
	p.mu.Unlock()
}

func (p *fakePeers) take() []sentMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.sent
	p.sent = nil
	return out
}

const (
	self    = 1
	other   = 2
	session = 7
	timeout = time.Second
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type fixture struct {
	clock *clock.Fake
	rep   *fakeReplica
	peers *fakePeers
	l     *Liveness
}

// newFixture returns member self's Liveness on a fake clock, with session
// in the state (and tracked, as the apply path would have it).
func newFixture(t *testing.T, c clock.Clock) *fixture {
	t.Helper()
	fake, _ := c.(*clock.Fake)
	f := fsm.New()
	create := &command.Command{Op: command.OpSessionCreate, SessionID: session, TimeoutMs: uint64(timeout.Milliseconds())}
	res, _ := f.Apply(1, create)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	rep := &fakeReplica{fsm: f, lastTick: c.Now()}
	peers := &fakePeers{}
	l := New(Config{
		Self: self, Replica: rep, Peers: peers, Clock: c, Logger: quiet,
		MinSessionTTL: 2 * time.Second, ElectionTimeout: time.Second, RequestTimeout: time.Second,
	})
	l.AppliedLocked(create, res)
	return &fixture{clock: fake, rep: rep, peers: peers, l: l}
}

// lead makes member self the leader of term, as the replica would tell it.
func (fx *fixture) lead(term uint64) {
	fx.l.LeaderChanging(self, term)
	fx.rep.set(self, term)
	fx.l.LeaderChanged(self, term)
}

func (fx *fixture) follow(leader, term uint64) {
	fx.l.LeaderChanging(leader, term)
	fx.rep.set(leader, term)
	fx.l.LeaderChanged(leader, term)
}

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestExpiryAfterTimeout: in virtual time, the leader proposes a session's
// expiry once its timeout has passed without a heartbeat, not a
// millisecond before, stamped with the leader's term.
func TestExpiryAfterTimeout(t *testing.T) {
	fx := newFixture(t, clock.NewFake(start))
	fx.lead(3)
	fx.clock.Advance(timeout)
	if fx.l.expireDue() {
		t.Fatalf("expired at exactly the timeout: %v", fx.rep.expiries())
	}
	fx.clock.Advance(time.Millisecond)
	if !fx.l.expireDue() {
		t.Fatal("nothing expired a millisecond past the timeout")
	}
	if got := fx.rep.expiries(); len(got) != 1 || !slices.Equal(got[0], []uint64{session}) {
		t.Fatalf("expiries proposed %v, want one of [%d]", got, session)
	}
	if c := fx.rep.proposed[0]; c.LeaderTerm != 3 {
		t.Fatalf("the expiry carries term %d, want 3", c.LeaderTerm)
	}
	if fx.l.expireDue() {
		t.Fatal("a session whose expiry is in flight was proposed again")
	}
}

// TestHeartbeatDefersExpiry: a heartbeat on the leader renews the full
// timeout from the moment it is heard.
func TestHeartbeatDefersExpiry(t *testing.T) {
	fx := newFixture(t, clock.NewFake(start))
	fx.lead(1)
	fx.clock.Advance(timeout - time.Millisecond)
	if _, dead, err := fx.l.Heartbeat(context.Background(), []uint64{session}); err != nil || len(dead) > 0 {
		t.Fatalf("heartbeat: dead %v, err %v", dead, err)
	}
	fx.clock.Advance(timeout)
	if fx.l.expireDue() {
		t.Fatal("expired a timeout after the heartbeat, not past it")
	}
	fx.clock.Advance(time.Millisecond)
	if !fx.l.expireDue() {
		t.Fatal("not expired past a timeout after the last heartbeat")
	}
}

// TestHeartbeatDuringVoidExpiry: a leader whose deadlines passed (it was
// stalled) marks the sessions expiring, then finds in its ReadIndex round
// that it was deposed: the expiry is void and the sessions live on. A
// heartbeat heard meanwhile must not answer them expired (etcd #15247's
// storm, as seen by a client): it is not answered until the outcome is
// known, and answered alive after.
func TestHeartbeatDuringVoidExpiry(t *testing.T) {
	fx := newFixture(t, clock.NewFake(start))
	fx.lead(1)
	checking, deposed := make(chan struct{}), make(chan struct{})
	fx.rep.readIndex = func(context.Context) (uint64, error) {
		close(checking)
		<-deposed
		return 0, errors.New("deposed: a higher term was seen")
	}
	fx.clock.Advance(timeout + time.Millisecond)
	fx.rep.mu.Lock()
	fx.rep.lastTick = fx.clock.Now() // its Ready loop resumed and ticks
	fx.rep.mu.Unlock()
	expired := make(chan bool)
	go func() { expired <- fx.l.expireDue() }()
	<-checking
	_, dead, err := fx.l.Heartbeat(context.Background(), []uint64{session})
	if len(dead) > 0 {
		t.Errorf("a heartbeat during the expiry's leadership check answered %v expired", dead)
	}
	if api.CodeOf(err) != api.CodeUnavailable {
		t.Errorf("a heartbeat during the expiry's leadership check: %v, want unavailable", err)
	}
	close(deposed)
	if <-expired {
		t.Fatal("expireDue reported an expiry whose leadership check failed")
	}
	if got := fx.rep.expiries(); len(got) > 0 {
		t.Fatalf("expiries proposed after a failed leadership check: %v", got)
	}
	if _, dead, err := fx.l.Heartbeat(context.Background(), []uint64{session}); err != nil || len(dead) > 0 {
		t.Fatalf("heartbeat after the void expiry: dead %v, err %v", dead, err)
	}
}

// TestNewLeaderGrantsFullTimeout: a session whose deadline passed while
// this member followed is not expired when it becomes leader: it first gets
// a full timeout from its election.
func TestNewLeaderGrantsFullTimeout(t *testing.T) {
	fx := newFixture(t, clock.NewFake(start))
	fx.follow(other, 1)
	fx.clock.Advance(10 * timeout)
	if fx.l.expireDue() {
		t.Fatal("a follower proposed an expiry")
	}
	fx.lead(2)
	if fx.l.expireDue() {
		t.Fatal("a new leader expired a session at once")
	}
	fx.clock.Advance(timeout)
	if fx.l.expireDue() {
		t.Fatal("a new leader expired a session before a full timeout")
	}
	fx.clock.Advance(time.Millisecond)
	if !fx.l.expireDue() {
		t.Fatal("not expired a full timeout after the election")
	}
}

// TestExpiryLoop: RunExpiry proposes on its own as the fake clock advances.
func TestExpiryLoop(t *testing.T) {
	fx := newFixture(t, clock.NewFake(start))
	fx.lead(1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { fx.l.RunExpiry(stop); close(done) }()
	defer func() { close(stop); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fx.clock.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("the expiry ticker: %v", err)
	}
	fx.clock.Advance(timeout + time.Second)
	for len(fx.rep.expiries()) == 0 {
		if ctx.Err() != nil {
			t.Fatal("RunExpiry proposed no expiry past the timeout")
		}
		fx.clock.Advance(100 * time.Millisecond) // ticks again, in case the first was taken before
		time.Sleep(time.Millisecond)
	}
}

// TestRelayAndAck: a follower relays the heartbeats it heard to the leader,
// which renews their deadlines and acknowledges; the acknowledgement keeps
// the follower answering heartbeats, until the relay staleness passes
// without one. An acknowledgement from a member that does not lead counts
// for nothing.
func TestRelayAndAck(t *testing.T) {
	c := clock.NewFake(start)
	follower := newFixture(t, c)
	follower.follow(other, 1)
	leader := newFixture(t, c)
	leader.l.cfg.Self = other
	leader.l.LeaderChanging(other, 1)
	leader.rep.set(other, 1)

	if _, dead, err := follower.l.Heartbeat(context.Background(), []uint64{session}); err != nil || len(dead) > 0 {
		t.Fatalf("heartbeat on the follower: dead %v, err %v", dead, err)
	}
	follower.l.relayOnce()
	sent := follower.peers.take()
	relay, ok := sent[0].m.(transport.SessionRelay)
	if len(sent) != 1 || !ok || sent[0].to != other || !slices.Equal(relay.SessionIDs, []uint64{session}) {
		t.Fatalf("the follower sent %+v, want one relay of [%d] to the leader", sent, session)
	}

	c.Advance(timeout - time.Millisecond)
	leader.l.ReceiveRelay(self, relay.SessionIDs)
	acks := leader.peers.take()
	if _, ok := acks[0].m.(transport.SessionRelayAck); len(acks) != 1 || !ok || acks[0].to != self {
		t.Fatalf("the leader sent %+v, want one acknowledgement to the follower", acks)
	}
	c.Advance(2 * time.Millisecond)
	if leader.l.expireDue() {
		t.Fatal("the leader expired a session whose relayed heartbeat it had just renewed")
	}

	staleness := follower.l.relayStaleness()
	follower.l.ReceiveRelayAck(other)
	c.Advance(staleness)
	if err := follower.l.CanRelay(); err != nil {
		t.Fatalf("within the staleness of an acknowledgement: %v", err)
	}
	c.Advance(time.Millisecond)
	follower.l.ReceiveRelayAck(3) // not the leader
	if err := follower.l.CanRelay(); api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "not acknowledged") {
		t.Fatalf("past the staleness: %v, want 503 for unacknowledged relays", err)
	}
	if _, _, err := follower.l.Heartbeat(context.Background(), []uint64{session}); api.CodeOf(err) != api.CodeUnavailable {
		t.Fatalf("a heartbeat on a stale follower: %v, want 503", err)
	}
	follower.l.ReceiveRelayAck(other)
	if err := follower.l.CanRelay(); err != nil {
		t.Fatalf("after a fresh acknowledgement: %v", err)
	}
}

// TestRelayStalenessIgnoresWallClockJumps is the regression test of the
// relay acknowledgement's clock: it was stored as time.Now().UnixNano() and
// read back with time.Since(time.Unix(0, ...)), a wall-clock reading, so a
// step of the system clock moved it (an hour back: a follower cut off from
// the leader would have vouched for sessions for an hour). It is now a
// reading of the injected clock, kept as a time.Time: only elapsed time on
// that clock makes it stale, whatever the wall clock does. (The old code
// read the real clock, so this test's virtual time could not make it stale.)
func TestRelayStalenessIgnoresWallClockJumps(t *testing.T) {
	tests := []struct {
		name string
		jump time.Duration
	}{
		{"wall clock stepped back an hour", -time.Hour},
		{"wall clock stepped forward an hour", time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := clock.NewFake(start)
			skewed := clock.NewSkewed(base)
			fx := newFixture(t, skewed)
			fx.follow(other, 1)
			staleness := fx.l.relayStaleness()
			skewed.Jump(tt.jump)
			if err := fx.l.CanRelay(); err != nil {
				t.Fatalf("right after the acknowledgement and a jump: %v", err)
			}
			base.Advance(staleness + time.Millisecond)
			skewed.Jump(tt.jump)
			if err := fx.l.CanRelay(); api.CodeOf(err) != api.CodeUnavailable {
				t.Fatalf("past the staleness (and a jump): %v, want 503", err)
			}
		})
	}
}

// TestLeaderStallDetected: a leader whose Ready loop has not ticked for more
// than an election timeout on its clock refuses heartbeats.
func TestLeaderStallDetected(t *testing.T) {
	fx := newFixture(t, clock.NewFake(start))
	fx.lead(1)
	fx.clock.Advance(time.Second)
	if err := fx.l.CanRelay(); err != nil {
		t.Fatalf("a leader that ticked an election timeout ago: %v", err)
	}
	fx.clock.Advance(time.Millisecond)
	if err := fx.l.CanRelay(); api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("a stalled leader: %v, want 503 stalled", err)
	}
	fx.rep.mu.Lock()
	fx.rep.lastTick = fx.clock.Now()
	fx.rep.mu.Unlock()
	if err := fx.l.CanRelay(); err != nil {
		t.Fatalf("after a tick: %v", err)
	}
}

// TestRelayMessagesSplit: relays carry at most transport.MaxRelayIDs ids; no
// ids is one empty relay, acknowledged all the same.
func TestRelayMessagesSplit(t *testing.T) {
	tests := []struct {
		name  string
		ids   int
		sizes []int
	}{
		{"none", 0, []int{0}},
		{"one", 1, []int{1}},
		{"exactly full", transport.MaxRelayIDs, []int{transport.MaxRelayIDs}},
		{"one over", transport.MaxRelayIDs + 1, []int{transport.MaxRelayIDs, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids := make([]uint64, tt.ids)
			var sizes []int
			for _, r := range relayMessages(ids) {
				sizes = append(sizes, len(r.SessionIDs))
			}
			if !slices.Equal(sizes, tt.sizes) {
				t.Fatalf("relay sizes %v, want %v", sizes, tt.sizes)
			}
		})
	}
}
