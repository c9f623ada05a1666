package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Network is an in-memory network for tests: nodes join it with a Handler
// and get a Transport; the test injects faults between them. Raft and peer
// messages share each link and its faults. Messages are
// marshalled and unmarshalled on the way, so no memory is shared. Messages on one
// directed link (from, to) are delivered in order by one goroutine per link,
// like a TCP stream; drop decisions come from a random source per link seeded
// from the network's seed, so a link that sees the same messages makes the
// same drops. Delays use the wall clock.
//
// What a fault does: a message between blocked nodes (Partition, Cut,
// Isolate) or chosen by SetDrop vanishes silently, as on a real network; a
// message to a node that has not joined or has left (a crashed process) is
// dropped and reported through ReportUnreachable, as a refused connection
// would be. Blocks are checked when a message is sent and again when it is
// delivered, so a partition also cuts messages in flight. A MsgSnap that is
// lost ends in ReportSnapshot(SnapshotFailure).
type Network struct {
	seed         int64
	done         chan struct{} // closed by Close
	lostInFlight atomic.Uint64 // messages sent but dropped at delivery time

	mu        sync.Mutex // guards the fields below and every endpoint's removed and closed
	endpoints map[uint64]*endpoint
	links     map[link]*linkQueue
	blocked   map[link]bool // directed links cut by Partition or Cut
	isolated  map[uint64]bool
	dropRate  map[link]float64
	delays    map[link]time.Duration
	closed    bool
}

// link is a directed pair of node ids.
type link struct{ from, to uint64 }

// linkQueueSize bounds the messages in flight on one link; more are dropped
// and reported unreachable, as the TCP transport's full queue would.
const linkQueueSize = 4096

// NewNetwork returns an empty network whose random drops derive from seed.
func NewNetwork(seed int64) *Network {
	return &Network{
		seed:      seed,
		done:      make(chan struct{}),
		endpoints: make(map[uint64]*endpoint),
		links:     make(map[link]*linkQueue),
		blocked:   make(map[link]bool),
		isolated:  make(map[uint64]bool),
		dropRate:  make(map[link]float64),
		delays:    make(map[link]time.Duration),
	}
}

// Join attaches node id with its handler and snapshot store and returns its
// transport. Joining again (a restart after a crash) replaces the old
// endpoint: messages in flight to the old one are dropped, and the old
// transport sends nothing more. Faults set for id stay in force.
func (n *Network) Join(id uint64, h Handler, s Snapshots) Transport {
	ctx, cancel := context.WithCancel(context.Background())
	e := &endpoint{network: n, id: id, handler: h, snapshots: s, ctx: ctx, cancel: cancel,
		reports: newReporter(h), removed: make(map[uint64]bool)}
	n.mu.Lock()
	old := n.endpoints[id]
	n.endpoints[id] = e
	if old != nil {
		old.closeLocked()
	}
	n.mu.Unlock()
	go e.reports.run(ctx)
	return e
}

// Leave crashes node id: its transport goes silent and messages to it are
// dropped (and reported unreachable to their senders).
func (n *Network) Leave(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e := n.endpoints[id]; e != nil {
		delete(n.endpoints, id)
		e.closeLocked()
	}
}

// Partition blocks every link between nodes of different sides, in both
// directions. Nodes named in no side keep their links.
func (n *Network) Partition(sides ...[]uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, side := range sides {
		for _, other := range sides[i+1:] {
			for _, a := range side {
				for _, b := range other {
					n.blocked[link{a, b}] = true
					n.blocked[link{b, a}] = true
				}
			}
		}
	}
}

// Cut blocks messages from from to to; the other direction still works.
func (n *Network) Cut(from, to uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.blocked[link{from, to}] = true
}

// Isolate blocks every message to and from id.
func (n *Network) Isolate(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.isolated[id] = true
}

// Heal removes every fault: partitions, cuts, isolation, drops and delays.
// Nodes that left stay gone until they join again.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.blocked)
	clear(n.isolated)
	clear(n.dropRate)
	clear(n.delays)
}

// SetDrop makes the link from -> to lose each message with probability p.
func (n *Network) SetDrop(from, to uint64, p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropRate[link{from, to}] = p
}

// SetDelay delays every message on the link from -> to by d, keeping their order.
func (n *Network) SetDelay(from, to uint64, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delays[link{from, to}] = d
}

// Close stops the network's goroutines; every endpoint goes silent.
func (n *Network) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.closed = true
	for id, e := range n.endpoints {
		delete(n.endpoints, id)
		e.closeLocked()
	}
	close(n.done)
}

// blockedLocked reports whether l is cut. n.mu must be held.
func (n *Network) blockedLocked(l link) bool {
	return n.isolated[l.from] || n.isolated[l.to] || n.blocked[l]
}

// queueLocked returns the delivery queue of l, starting its goroutine. n.mu must be held.
func (n *Network) queueLocked(l link) *linkQueue {
	q := n.links[l]
	if q == nil {
		q = &linkQueue{
			deliveries: make(chan delivery, linkQueueSize),
			random:     rand.New(rand.NewPCG(uint64(n.seed), l.from<<32^l.to)),
		}
		n.links[l] = q
		go n.deliver(l, q)
	}
	return q
}

// linkQueue holds the messages in flight on one link.
type linkQueue struct {
	deliveries chan delivery
	random     *rand.Rand // drop decisions; guarded by Network.mu
}

// delivery is one message in flight: a raft message or a peer message.
type delivery struct {
	group   uint64
	message raftpb.Message
	peer    PeerMessage // not nil for a peer message
	at      time.Time   // not before
	from    *endpoint
	to      *endpoint // the incarnation the message was sent to
}

// deliver is the goroutine of link l: it hands messages to the receiver in order.
func (n *Network) deliver(l link, q *linkQueue) {
	for {
		var d delivery
		select {
		case d = <-q.deliveries:
		case <-n.done:
			return
		}
		if !n.sleepUntil(d.at) {
			return
		}
		if !n.stillDeliverable(d) {
			n.lostInFlight.Add(1)
			if d.peer == nil && d.message.Type == raftpb.MsgSnap {
				d.from.reportSnapshotAsync(d.group, l.to, raft.SnapshotFailure)
			}
			continue
		}
		switch {
		case d.peer != nil:
			d.to.handler.ReceivePeer(d.to.ctx, d.from.id, d.peer)
		case d.message.Type == raftpb.MsgSnap:
			go n.deliverSnapshot(d)
		default:
			d.to.handler.Process(d.to.ctx, d.group, d.message)
		}
	}
}

// sleepUntil waits for at; it returns false if the network closed.
func (n *Network) sleepUntil(at time.Time) bool {
	wait := time.Until(at)
	if wait <= 0 {
		return true
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-n.done:
		return false
	}
}

// stillDeliverable reports whether d's receiver is the incarnation it was
// sent to and the link is not blocked now.
func (n *Network) stillDeliverable(d delivery) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.endpoints[d.to.id] == d.to && !d.to.closed && !n.blockedLocked(link{d.from.id, d.to.id})
}

// deliverSnapshot copies the sender's snapshot body into the receiver's
// store, then hands it the MsgSnap, and reports the outcome to the sender.
func (n *Network) deliverSnapshot(d delivery) {
	status := raft.SnapshotFinish
	if err := d.to.receiveSnapshot(d.from, d.group, d.message); err != nil {
		status = raft.SnapshotFailure
	}
	d.from.reportSnapshotAsync(d.group, d.to.id, status)
}

// endpoint is one node's transport on a Network.
type endpoint struct {
	network   *Network
	id        uint64
	handler   Handler
	snapshots Snapshots
	ctx       context.Context // cancelled when the endpoint closes
	cancel    context.CancelFunc
	reports   *reporter

	removed map[uint64]bool // peers removed by RemovePeer; guarded by network.mu
	closed  bool            // guarded by network.mu
}

var _ Transport = (*endpoint)(nil)

// Send implements Transport.
func (e *endpoint) Send(group uint64, msgs []raftpb.Message) {
	n := e.network
	n.mu.Lock()
	defer n.mu.Unlock()
	if e.closed {
		return
	}
	for _, m := range msgs {
		e.sendLocked(group, m)
	}
}

// sendLocked routes one message. network.mu must be held.
func (e *endpoint) sendLocked(group uint64, m raftpb.Message) {
	n := e.network
	l := link{e.id, m.To}
	lost := func(unreachable bool) {
		if m.Type == raftpb.MsgSnap {
			e.reportSnapshotAsync(group, m.To, raft.SnapshotFailure)
		} else if unreachable {
			e.reports.unreachable(group, m.To)
		}
	}
	to := n.endpoints[m.To]
	if m.To == e.id || e.removed[m.To] || to == nil {
		lost(true)
		return
	}
	q := n.queueLocked(l)
	if n.blockedLocked(l) || q.random.Float64() < n.dropRate[l] {
		lost(false)
		return
	}
	m, err := roundTrip(m)
	if err != nil {
		lost(true)
		return
	}
	select {
	case q.deliveries <- delivery{group: group, message: m, at: time.Now().Add(n.delays[l]), from: e, to: to}:
	default:
		lost(true)
	}
}

// SendPeer implements Transport. A peer message meets the same faults as a
// raft message on its link; one that is lost is reported to no group.
func (e *endpoint) SendPeer(to uint64, m PeerMessage) {
	n := e.network
	n.mu.Lock()
	defer n.mu.Unlock()
	receiver := n.endpoints[to]
	if e.closed || to == e.id || e.removed[to] || receiver == nil {
		return
	}
	l := link{e.id, to}
	q := n.queueLocked(l)
	if n.blockedLocked(l) || q.random.Float64() < n.dropRate[l] {
		return
	}
	m, err := roundTripPeer(m)
	if err != nil {
		return
	}
	select {
	case q.deliveries <- delivery{peer: m, at: time.Now().Add(n.delays[l]), from: e, to: receiver}:
	default:
	}
}

// reportSnapshotAsync reports a snapshot outcome from a new goroutine, so
// that no report is made from inside Send or while network.mu is held.
func (e *endpoint) reportSnapshotAsync(group, to uint64, status raft.SnapshotStatus) {
	go e.handler.ReportSnapshot(group, to, status)
}

// receiveSnapshot streams the snapshot of m from sender's store into e's,
// then hands m to e's handler.
func (e *endpoint) receiveSnapshot(sender *endpoint, group uint64, m raftpb.Message) error {
	if sender.snapshots == nil || e.snapshots == nil {
		return ErrNoSnapshots
	}
	body, size, err := sender.snapshots.Open(group, m)
	if err != nil {
		return fmt.Errorf("open snapshot: %w", err)
	}
	defer body.Close()
	counted := &countingReader{reader: body}
	if err := e.snapshots.Receive(group, m, counted); err != nil {
		return fmt.Errorf("receive snapshot: %w", err)
	}
	if counted.count != size {
		return fmt.Errorf("snapshot store read %d of %d bytes", counted.count, size)
	}
	return e.handler.Process(e.ctx, group, m)
}

// AddPeer implements Transport. Peers need not be added on the fake
// network; AddPeer undoes RemovePeer.
func (e *endpoint) AddPeer(id uint64, addr string) {
	e.network.mu.Lock()
	defer e.network.mu.Unlock()
	delete(e.removed, id)
}

// RemovePeer implements Transport: messages to id are dropped.
func (e *endpoint) RemovePeer(id uint64) {
	e.network.mu.Lock()
	defer e.network.mu.Unlock()
	e.removed[id] = true
}

// Close implements Transport: the node leaves the network.
func (e *endpoint) Close() error {
	n := e.network
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.endpoints[e.id] == e {
		delete(n.endpoints, e.id)
	}
	e.closeLocked()
	return nil
}

// closeLocked silences e. network.mu must be held.
func (e *endpoint) closeLocked() {
	e.closed = true
	e.cancel()
}

// roundTrip marshals and unmarshals m, as the wire would: the receiver
// shares no memory with the sender, and an unencodable message is caught.
func roundTrip(m raftpb.Message) (raftpb.Message, error) {
	data, err := m.Marshal()
	if err != nil {
		return raftpb.Message{}, fmt.Errorf("marshal %s: %w", m.Type, err)
	}
	var copied raftpb.Message
	if err := copied.Unmarshal(data); err != nil {
		return raftpb.Message{}, fmt.Errorf("unmarshal %s: %w", m.Type, err)
	}
	return copied, nil
}

// roundTripPeer encodes and decodes m, as the wire would.
func roundTripPeer(m PeerMessage) (PeerMessage, error) {
	data, err := appendPeerMessage(nil, m)
	if err != nil {
		return nil, err
	}
	return decodePeerMessage(data)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	reader interface{ Read([]byte) (int, error) }
	count  int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.reader.Read(p)
	c.count += int64(n)
	return n, err
}
