package sessions

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/clock"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/replica"
	"github.com/latch-io/latch/internal/transport"
)

// Replica is what Liveness uses of its group's runtime (*replica.Replica).
type Replica interface {
	Leader() uint64
	Term() uint64
	LastTick() time.Time
	Propose(ctx context.Context, cmd *command.Command) (fsm.Result, uint64, error)
	ReadIndex(ctx context.Context) (uint64, error)
	Barrier(ctx context.Context, consistency string, minIndex uint64) error
	View(fn func(f *fsm.FSM)) uint64
	Unavailable(format string, args ...any) error
}

// Peers sends typed peer messages (the server's transport).
type Peers interface {
	SendPeer(to uint64, m transport.PeerMessage)
}

// Metrics counts the sessions the applied entries created or ended.
type Metrics interface {
	SessionsCreated(n int)
	SessionsClosed(n int)
	SessionsExpired(n int)
}

// Config is what Liveness needs from the server.
type Config struct {
	Self            uint64 // this member's raft id
	Replica         Replica
	Peers           Peers
	Metrics         Metrics // default: none
	Clock           clock.Clock
	Logger          *slog.Logger
	MinSessionTTL   time.Duration // paces the relay and expiry loops
	ElectionTimeout time.Duration
	RequestTimeout  time.Duration
}

// Liveness keeps the sessions of one group alive (see the package comment).
// Register it as a replica.Listener of its group.
type Liveness struct {
	replica.NopListener
	cfg     Config
	tracker *tracker

	// relayAcked is when the leader last acknowledged this server's relay: a
	// reading of cfg.Clock (nil before the first leader), kept as a time.Time
	// so that a step of the wall clock does not move it.
	relayAcked atomic.Pointer[time.Time]
}

// New returns the Liveness of one group.
func New(cfg Config) *Liveness {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nopMetrics{}
	}
	return &Liveness{cfg: cfg, tracker: newTracker()}
}

type nopMetrics struct{}

func (nopMetrics) SessionsCreated(int) {}
func (nopMetrics) SessionsClosed(int)  {}
func (nopMetrics) SessionsExpired(int) {}

// AppliedLocked tracks the sessions an applied command created or ended.
// The metrics count before the tracker forgets the ended sessions: an expiry
// entry names sessions that may have ended already (closed meanwhile), which
// the state machine skips, and the tracker, which holds exactly the live
// sessions, tells them apart.
func (l *Liveness) AppliedLocked(cmd *command.Command, res fsm.Result) {
	switch cmd.Op {
	case command.OpSessionCreate:
		if res.Err == nil {
			l.cfg.Metrics.SessionsCreated(1)
			l.tracker.created(res.SessionID, res.TimeoutMs, l.cfg.Clock.Now())
		}
	case command.OpSessionClose:
		if res.Err == nil {
			l.cfg.Metrics.SessionsClosed(1)
		}
		l.tracker.ended(cmd.SessionID)
	case command.OpSessionExpire:
		l.cfg.Metrics.SessionsExpired(l.tracker.countTracked(cmd.Sessions))
		for _, id := range cmd.Sessions {
			l.tracker.ended(id)
		}
	}
}

// RestoredLocked tracks the sessions of a restored state, each with a full
// timeout from now.
func (l *Liveness) RestoredLocked(f *fsm.FSM, _ uint64) {
	l.tracker.reset(f.Sessions(), l.cfg.Clock.Now())
}

// LeaderChanging renews every deadline when this server becomes leader,
// before it shows itself as leader, so the expiry loop never sees a leader
// with a follower's stale deadlines.
func (l *Liveness) LeaderChanging(leader, term uint64) {
	if leader == l.cfg.Self {
		l.tracker.lead(l.cfg.Clock.Now(), term)
	} else {
		l.tracker.follow()
	}
}

// LeaderChanged gives a new leader the staleness window to acknowledge a
// first relay.
func (l *Liveness) LeaderChanged(uint64, uint64) { l.ackedNow() }

func (l *Liveness) ackedNow() {
	now := l.cfg.Clock.Now()
	l.relayAcked.Store(&now)
}

// Heartbeat keeps sessions alive. It is answered here, without a log write;
// sessions unknown here are looked up again after a linearizable barrier
// (they may have been created through a server this one has not caught up
// with). It returns the applied index and the ids that are not alive
// (expired or closed).
func (l *Liveness) Heartbeat(ctx context.Context, ids []uint64) (uint64, []uint64, error) {
	if err := l.CanRelay(); err != nil {
		return 0, nil, err
	}
	r := l.cfg.Replica
	index, dead := l.NotAlive(ids)
	if len(dead) > 0 {
		if err := r.Barrier(ctx, api.Linearizable, 0); err != nil {
			return 0, nil, err
		}
		index, dead = l.NotAlive(ids)
	}
	alive := ids
	if len(dead) > 0 {
		alive = without(ids, dead)
	}
	if r.Leader() == l.cfg.Self {
		// A session whose expiry is being proposed is not dead yet: the
		// proposal waits for a ReadIndex round, which fails if this leader
		// was deposed meanwhile (a stalled leader's deadlines are stale),
		// and the session then lives on. Its fate is known once the expiry
		// is applied or given up; until then the heartbeat is not answered.
		if expiring := l.tracker.touch(alive, l.cfg.Clock.Now()); len(expiring) > 0 {
			return 0, nil, r.Unavailable("the expiry of %d of these sessions is being decided; send the heartbeat again", len(expiring))
		}
	} else {
		for _, id := range alive {
			l.tracker.addRelay(id)
		}
	}
	return index, dead, nil
}

// CanRelay reports whether heartbeats received here reach the leader: this
// server leads, or a leader acknowledged its relays recently.
func (l *Liveness) CanRelay() error {
	r := l.cfg.Replica
	lead := r.Leader()
	switch {
	case lead == raft.None:
		return r.Unavailable("no leader known here; send heartbeats to another server")
	case lead == l.cfg.Self:
		// A leader whose Ready loop is stuck (a slow fsync) stops ticking and
		// so cannot notice that the others elected a new leader meanwhile.
		if stalled := l.cfg.Clock.Since(r.LastTick()); stalled > l.cfg.ElectionTimeout {
			return r.Unavailable("this leader has been stalled for %v; send heartbeats to another server", stalled.Round(time.Millisecond))
		}
		return nil
	}
	acked := l.relayAcked.Load()
	if acked == nil {
		return r.Unavailable("the leader has not acknowledged this server's heartbeat relays yet; send heartbeats to another server")
	}
	if since := l.cfg.Clock.Since(*acked); since > l.relayStaleness() {
		return r.Unavailable("the leader has not acknowledged this server's heartbeat relays for %v; send heartbeats to another server", since.Round(time.Millisecond))
	}
	return nil
}

// relayInterval is how often a follower sends its heard heartbeats (and, with
// none, an empty relay that the leader still acknowledges).
func (l *Liveness) relayInterval() time.Duration {
	return max(l.cfg.MinSessionTTL/8, 50*time.Millisecond)
}

// relayStaleness is how long a follower answers heartbeats without an
// acknowledged relay: a few relay rounds, at least an election timeout.
func (l *Liveness) relayStaleness() time.Duration {
	return max(4*l.relayInterval(), l.cfg.ElectionTimeout)
}

// NotAlive returns the applied index and the ids not alive here.
func (l *Liveness) NotAlive(ids []uint64) (uint64, []uint64) {
	var dead []uint64
	index := l.cfg.Replica.View(func(f *fsm.FSM) {
		for _, id := range ids {
			if _, err := f.Session(id); err != nil {
				dead = append(dead, id)
			}
		}
	})
	return index, dead
}

// without returns ids minus the (few) ids in drop.
func without(ids, drop []uint64) []uint64 {
	out := make([]uint64, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(drop, id) {
			out = append(out, id)
		}
	}
	return out
}

// RunRelay sends the heartbeats heard here to the leader every relay
// interval, until stop closes.
func (l *Liveness) RunRelay(stop <-chan struct{}) {
	ticker := l.cfg.Clock.NewTicker(l.relayInterval())
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C():
		case <-stop:
			return
		}
		l.relayOnce()
	}
}

// relayOnce sends (or, leading, applies) the heartbeats heard since the last.
func (l *Liveness) relayOnce() {
	ids := l.tracker.takeRelay()
	lead := l.cfg.Replica.Leader()
	switch lead {
	case raft.None:
	case l.cfg.Self:
		_ = l.tracker.touch(ids, l.cfg.Clock.Now())
	default:
		for _, relay := range relayMessages(ids) {
			l.cfg.Peers.SendPeer(lead, relay)
		}
	}
}

// relayMessages packs ids into relays of at most transport.MaxRelayIDs each;
// with no ids, one empty relay, which the leader acknowledges all the same.
func relayMessages(ids []uint64) []transport.SessionRelay {
	var relays []transport.SessionRelay
	for {
		n := min(len(ids), transport.MaxRelayIDs)
		relays = append(relays, transport.SessionRelay{SessionIDs: ids[:n]})
		ids = ids[n:]
		if len(ids) == 0 {
			return relays
		}
	}
}

// ReceiveRelay extends the deadlines of heartbeats relayed by member from
// and acknowledges them, if this server leads.
func (l *Liveness) ReceiveRelay(from uint64, ids []uint64) {
	if l.cfg.Replica.Leader() != l.cfg.Self {
		return
	}
	_ = l.tracker.touch(ids, l.cfg.Clock.Now()) // the follower learns of expiries from the log
	l.cfg.Peers.SendPeer(from, transport.SessionRelayAck{})
}

// ReceiveRelayAck records the leader's acknowledgement of this server's relays.
func (l *Liveness) ReceiveRelayAck(from uint64) {
	if from == l.cfg.Replica.Leader() {
		l.ackedNow()
	}
}

// RunExpiry proposes the expiry of sessions past their deadline while this
// server leads, until stop closes.
func (l *Liveness) RunExpiry(stop <-chan struct{}) {
	ticker := l.cfg.Clock.NewTicker(max(l.cfg.MinSessionTTL/20, 20*time.Millisecond))
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C():
		case <-stop:
			return
		}
		if l.cfg.Replica.Leader() != l.cfg.Self {
			continue
		}
		for l.expireDue() {
		}
	}
}

// expireDue proposes the expiry of up to 1,024 sessions past their deadline
// and reports whether there were any. The proposal carries the term whose
// deadlines decided it, and goes out only after a ReadIndex round confirmed
// this server still leads (a leader that stalled may have been replaced).
func (l *Liveness) expireDue() bool {
	r := l.cfg.Replica
	term := r.Term()
	ids := l.tracker.due(l.cfg.Clock.Now(), 1024, term)
	if len(ids) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.RequestTimeout)
	defer cancel()
	_, err := r.ReadIndex(ctx)
	if err == nil && r.Term() != term {
		err = replica.ErrVoidExpiry
	}
	if err == nil {
		var res fsm.Result
		res, _, err = r.Propose(ctx, &command.Command{Op: command.OpSessionExpire, Sessions: ids, LeaderTerm: term})
		err = cmp.Or(err, res.Err)
	}
	if err != nil {
		l.tracker.unmark(ids)
		return false
	}
	l.cfg.Logger.Info("expired sessions", "count", len(ids), "term", term)
	return true
}
