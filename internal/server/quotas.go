package server

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
)

// Quotas across shards (docs/design.md, "Quotas across shards"; the ledger
// is internal/fsm's quota_ledger.go). With more than one shard:
//   - a quota change is applied in shard 0, then shard 0's whole quota
//     table is synced to every other shard (syncQuotaTables), each at its
//     own index; the change is answered once every shard has it. Until
//     then a shard enforces the table it has;
//   - a quota_set carries the usage under its prefix of every shard other
//     than 0, read through a barrier of each (othersUsage): shard 0's
//     allotment of a new epoch is the limit minus it;
//   - a write a shard refuses for want of allotment (fsm.RedoQuotaRoom) is
//     answered only after room was sought: the transfers already given to
//     that shard are finished, then room is given by the shards with the
//     most free allotment (a give in the donor, the takes in the recipient
//     in order, the settle in the donor), and the write is proposed again.
//     The refusal (507 quota_exceeded) is the answer only when the room
//     the cluster has for it, read fresh (the free allotments of the other
//     shards through barriers, plus the room in transit to this shard), is
//     less than the write needs (seekQuotaRoom); concurrent writers taking
//     the room moved make the server try again, at most maxQuotaRounds
//     times, then 503 unavailable (retryable);
//   - a loop on every member (runQuotaLedger) finishes, in each shard it
//     leads, the transfers a crashed or slow server left given and not
//     taken, and, while it leads shard 0, syncs the quota table to the
//     shards that lack its latest epoch and pays shard 0's debts (room
//     from the other shards' free allotments to shard 0 while its usage is
//     above its allotment). All are idempotent, so racing the original
//     server is harmless.

// maxQuotaRounds bounds the room moves made for one write.
const maxQuotaRounds = 8

// seekQuotaRoom answers round's refusal of a write in g for want of
// allotment: it moves room to g's shard, and reports whether to propose
// the write again (room moved, or room exists in the cluster and rounds
// remain); false means the cluster has less room than the write needs
// (507). Past maxQuotaRounds with room existing it returns unavailable.
func (s *Server) seekQuotaRoom(ctx context.Context, g *group, shorts []fsm.QuotaShortfall, round int) (bool, error) {
	moved, err := s.makeQuotaRoom(ctx, g.shard, shorts)
	if err != nil {
		return false, err
	}
	if moved && round < maxQuotaRounds {
		return true, nil
	}
	exists, err := s.roomExists(ctx, g.shard, shorts)
	switch {
	case err != nil:
		return false, err
	case !exists:
		return false, nil
	case round >= maxQuotaRounds:
		return false, g.Unavailable("shard %d: the quota room moved for this write was taken by concurrent writers %d times; retry", g.shard, round)
	}
	// Room exists but a concurrent mover took it first: back off, longer
	// each round, then move again.
	if !s.pauseCtx(ctx, min(s.cfg.TickInterval<<round, s.electionTimeout())) {
		return false, ctx.Err()
	}
	return true, nil
}

// roomExists reports whether, for each of recipient's shortfalls, the
// free allotments of the other shards (read through barriers) plus the
// room in transit to recipient cover what recipient's allotment lacks. A
// shard at another epoch of a quota counts as room (the tables are synced
// and the write proposed again).
func (s *Server) roomExists(ctx context.Context, recipient int, shorts []fsm.QuotaShortfall) (bool, error) {
	rg, err := s.shardGroup(recipient)
	if err != nil {
		return false, err
	}
	for _, short := range shorts {
		var have fsm.QuotaUsage
		var ok bool
		rg.View(func(f *fsm.FSM) { have, ok = f.QuotaShare(short.Prefix) })
		if !ok || have.Epoch != short.Epoch {
			return true, nil
		}
		needNodes, needBytes := missing(short.Nodes, have.AllotNodes), missing(short.Bytes, have.AllotBytes)
		donors, err := s.donors(ctx, recipient, short.Prefix)
		if err != nil {
			return false, err
		}
		var nodes, bytes uint64
		for _, d := range donors {
			if d.epoch != short.Epoch {
				return true, nil
			}
			nodes += d.nodes
			bytes += d.bytes
		}
		transitNodes, transitBytes := s.inTransit(recipient, short)
		if nodes+transitNodes < needNodes || bytes+transitBytes < needBytes {
			return false, nil
		}
	}
	return true, nil
}

// inTransit sums the room of short's quota and epoch given to recipient
// and not yet taken there, as this member's replicas have it.
func (s *Server) inTransit(recipient int, short fsm.QuotaShortfall) (nodes, bytes uint64) {
	rg := s.groups[recipient].Load()
	if rg == nil {
		return 0, 0
	}
	for donor, g := range s.allGroups() {
		if g == nil || donor == recipient {
			continue
		}
		var taken uint64
		rg.View(func(f *fsm.FSM) { taken = f.QuotaTaken(donor) })
		g.View(func(f *fsm.FSM) {
			for _, t := range f.QuotaTransfers() {
				if t.Recipient == recipient && t.Prefix == short.Prefix && t.Epoch == short.Epoch && t.Seq > taken {
					nodes += t.Nodes
					bytes += t.Bytes
				}
			}
		})
	}
	return nodes, bytes
}

// payQuotaDebts moves room to shard 0 for every quota whose usage there is
// above its allotment (a quota set below the usage): while the debt lasts,
// the other shards could reuse the room their deletes free.
func (s *Server) payQuotaDebts(ctx context.Context) error {
	var shorts []fsm.QuotaShortfall
	s.metaGroup().View(func(f *fsm.FSM) {
		for _, q := range f.Quotas() {
			short := fsm.QuotaShortfall{Prefix: q.Prefix, Epoch: q.Epoch}
			if q.MaxNodes > 0 && missing(q.Nodes, q.AllotNodes) > 0 {
				short.Nodes = q.Nodes
			}
			if q.MaxBytes > 0 && missing(q.Bytes, q.AllotBytes) > 0 {
				short.Bytes = q.Bytes
			}
			if short.Nodes|short.Bytes != 0 {
				shorts = append(shorts, short)
			}
		}
	})
	for _, short := range shorts {
		if _, err := s.moveRoom(ctx, 0, short); err != nil {
			return err
		}
	}
	return nil
}

// startQuotaLedger starts the ledger loop when there is more than one
// shard.
func (s *Server) startQuotaLedger() {
	if s.cfg.Shards > 1 {
		s.goBackground(s.runQuotaLedger)
	}
}

// runQuotaLedger finishes the transfers of the shards led here and syncs
// the quota table from shard 0, once an election timeout.
func (s *Server) runQuotaLedger() {
	for s.pause(s.electionTimeout()) {
		meta := s.metaGroup()
		if meta == nil || meta.Halted() != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		s.finishLedTransfers(ctx)
		if meta.Leader() == s.id {
			if err := s.syncQuotaTables(ctx); err != nil {
				s.log.Info("quota table sync not done; retrying", "err", err)
			} else if err := s.payQuotaDebts(ctx); err != nil {
				s.log.Info("quota debts not paid; retrying", "err", err)
			}
		}
		cancel()
	}
}

// finishLedTransfers finishes the outgoing transfers of every shard led by
// this member.
func (s *Server) finishLedTransfers(ctx context.Context) {
	for donor, g := range s.allGroups() {
		if g == nil || g.Leader() != s.id {
			continue
		}
		for _, recipient := range outgoingRecipients(g) {
			if err := s.finishTransfers(ctx, donor, recipient); err != nil {
				s.log.Info("quota transfers not finished; retrying", "donor", donor, "recipient", recipient, "err", err)
			}
		}
	}
}

// outgoingRecipients lists the shards g has unsettled transfers to.
func outgoingRecipients(g *group) []int {
	var recipients []int
	g.View(func(f *fsm.FSM) {
		for _, t := range f.QuotaTransfers() {
			if len(recipients) == 0 || recipients[len(recipients)-1] != t.Recipient {
				recipients = append(recipients, t.Recipient)
			}
		}
	})
	return recipients
}

// syncQuotaTables proposes shard 0's quota table in every other shard
// whose table is older (a sync not needed is ignored where it applies).
func (s *Server) syncQuotaTables(ctx context.Context) error {
	var epoch uint64
	var table []command.QuotaDef
	s.metaGroup().View(func(f *fsm.FSM) { epoch, table = f.QuotaTable() })
	if epoch == 0 {
		return nil
	}
	for shard := 1; shard < s.cfg.Shards; shard++ {
		g, err := s.shardGroup(shard)
		if err != nil {
			return err
		}
		var synced uint64
		g.View(func(f *fsm.FSM) { synced = f.QuotaSynced() })
		if synced >= epoch {
			continue
		}
		sync := command.AuthOp{Kind: command.AuthQuotaSync, Epoch: epoch, Quotas: table}
		if _, err := s.proposeLedger(ctx, g, sync); err != nil {
			return err
		}
	}
	return nil
}

// shardGroup returns shard's group, or unavailable if it is not running.
func (s *Server) shardGroup(shard int) (*group, error) {
	g := s.groups[shard].Load()
	if g == nil {
		return nil, api.Errorf(api.CodeUnavailable, "shard %d is not running yet", shard)
	}
	return g, nil
}

// proposeLedger proposes an auth change (a quota ledger change, in any
// shard) in g and returns its index; its refusal is an error.
func (s *Server) proposeLedger(ctx context.Context, g *group, op command.AuthOp) (uint64, error) {
	res, index, err := g.Propose(ctx, &command.Command{Op: command.OpAuth, Auth: op})
	if err != nil {
		return 0, err
	}
	if res.Err != nil {
		return 0, res.Err
	}
	return index, nil
}

// finishTransfers takes donor's outgoing transfers to recipient in
// sequence order (a duplicate is ignored there), then settles them in
// donor.
func (s *Server) finishTransfers(ctx context.Context, donor, recipient int) error {
	dg, err := s.shardGroup(donor)
	if err != nil {
		return err
	}
	rg, err := s.shardGroup(recipient)
	if err != nil {
		return err
	}
	var pending []fsm.QuotaTransfer
	dg.View(func(f *fsm.FSM) {
		for _, t := range f.QuotaTransfers() {
			if t.Recipient == recipient {
				pending = append(pending, t)
			}
		}
	})
	var last uint64
	for _, t := range pending {
		take := command.AuthOp{Kind: command.AuthQuotaTake, Prefix: t.Prefix, Shard: uint64(donor), Seq: t.Seq,
			Epoch: t.Epoch, MaxNodes: t.Nodes, MaxBytes: t.Bytes}
		if _, err := s.proposeLedger(ctx, rg, take); err != nil {
			return err
		}
		last = t.Seq
	}
	if last == 0 {
		return nil
	}
	_, err = s.proposeLedger(ctx, dg, command.AuthOp{Kind: command.AuthQuotaSettle, Shard: uint64(recipient), Seq: last})
	return err
}

// makeQuotaRoom seeks room for recipient's shortfalls: it finishes the
// transfers already given to recipient, then moves room from the shards
// with free allotment of each quota short (donors read through a barrier).
// It reports whether anything changed that may let the write through: room
// arrived, or a shard lacked the quota's epoch and the tables were synced.
func (s *Server) makeQuotaRoom(ctx context.Context, recipient int, shorts []fsm.QuotaShortfall) (bool, error) {
	for donor := range s.cfg.Shards {
		if donor == recipient {
			continue
		}
		if err := s.finishTransfers(ctx, donor, recipient); err != nil {
			return false, err
		}
	}
	moved := false
	for _, short := range shorts {
		got, err := s.moveRoom(ctx, recipient, short)
		if err != nil {
			return false, err
		}
		moved = moved || got
	}
	return moved, nil
}

// donorRoom is a shard's free allotment of one quota.
type donorRoom struct {
	shard        int
	epoch        uint64
	nodes, bytes uint64
}

// moveRoom moves room of short's quota to recipient from the shards with
// the most free allotment until recipient has what short asks for: from
// each donor at least what is missing and at most half its free room more
// (so the next refusals find room here), never more than it has free.
func (s *Server) moveRoom(ctx context.Context, recipient int, short fsm.QuotaShortfall) (bool, error) {
	rg, err := s.shardGroup(recipient)
	if err != nil {
		return false, err
	}
	var have fsm.QuotaUsage
	var ok bool
	rg.View(func(f *fsm.FSM) { have, ok = f.QuotaShare(short.Prefix) })
	if !ok || have.Epoch != short.Epoch {
		return true, nil // the quota changed since: propose again
	}
	needNodes, needBytes := missing(short.Nodes, have.AllotNodes), missing(short.Bytes, have.AllotBytes)
	if needNodes == 0 && needBytes == 0 {
		return true, nil // transfers finished above brought it
	}
	donors, err := s.donors(ctx, recipient, short.Prefix)
	if err != nil {
		return false, err
	}
	moved := false
	for _, d := range donors {
		if needNodes == 0 && needBytes == 0 {
			break
		}
		if d.epoch != short.Epoch {
			// A shard has another version of the quota: bring every shard
			// to shard 0's table, then propose again.
			return true, s.syncQuotaTables(ctx)
		}
		nodes, bytes := portion(needNodes, d.nodes), portion(needBytes, d.bytes)
		if nodes == 0 && bytes == 0 {
			continue
		}
		give := command.AuthOp{Kind: command.AuthQuotaGive, Prefix: short.Prefix, Shard: uint64(recipient), Epoch: short.Epoch, MaxNodes: nodes, MaxBytes: bytes}
		if _, err := s.proposeLedger(ctx, s.groups[d.shard].Load(), give); err != nil {
			if api.CodeOf(err) == api.CodeQuotaExceeded || api.CodeOf(err) == api.CodePreconditionFailed {
				continue // another writer took the room, or the quota changed
			}
			return moved, err
		}
		moved = true
		if err := s.finishTransfers(ctx, d.shard, recipient); err != nil {
			return moved, err // the donor's leader finishes it
		}
		needNodes -= min(needNodes, nodes)
		needBytes -= min(needBytes, bytes)
	}
	return moved, nil
}

// missing is what an allotment (negative: a debt) lacks of a need (0:
// nothing, or no need).
func missing(need uint64, allot int64) uint64 {
	if need == 0 || (allot >= 0 && need <= uint64(allot)) {
		return 0
	}
	if allot >= 0 {
		return need - uint64(allot)
	}
	return need + uint64(-allot)
}

// freeOf is an allotment's room beyond usage (0 in debt).
func freeOf(allot int64, usage uint64) uint64 {
	if allot <= 0 || uint64(allot) <= usage {
		return 0
	}
	return uint64(allot) - usage
}

// portion is what a donor with free room gives toward need: at least need
// and half its free room, at most its free room; 0 without need.
func portion(need, free uint64) uint64 {
	if need == 0 {
		return 0
	}
	return min(free, max(need, free/2))
}

// donors reads, through a barrier of each other shard (at once), their
// free allotment of the quota on prefix, and returns those with room, the
// most first.
func (s *Server) donors(ctx context.Context, recipient int, prefix string) ([]donorRoom, error) {
	rooms := make([]donorRoom, s.cfg.Shards)
	errs := make([]error, s.cfg.Shards)
	var wg sync.WaitGroup
	for shard := range s.cfg.Shards {
		if shard == recipient {
			continue
		}
		wg.Go(func() { rooms[shard], errs[shard] = s.freeRoom(ctx, shard, prefix) })
	}
	wg.Wait()
	var out []donorRoom
	for shard := range s.cfg.Shards {
		if errs[shard] != nil {
			return nil, errs[shard]
		}
		if r := rooms[shard]; r.nodes > 0 || r.bytes > 0 {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b donorRoom) int { return cmp.Compare(b.nodes+b.bytes, a.nodes+a.bytes) })
	return out, nil
}

// freeRoom is shard's free allotment of the quota on prefix, read after a
// linearizable barrier.
func (s *Server) freeRoom(ctx context.Context, shard int, prefix string) (donorRoom, error) {
	g, err := s.shardGroup(shard)
	if err != nil {
		return donorRoom{}, err
	}
	if err := g.Barrier(ctx, api.Linearizable, 0); err != nil {
		return donorRoom{}, err
	}
	r := donorRoom{shard: shard}
	g.View(func(f *fsm.FSM) {
		if q, ok := f.QuotaShare(prefix); ok {
			r.epoch = q.Epoch
			r.nodes, r.bytes = freeOf(q.AllotNodes, q.Nodes), freeOf(q.AllotBytes, q.Bytes)
		}
	})
	return r, nil
}

// othersUsage sums the usage under prefix of every shard other than 0,
// each read after a linearizable barrier (at once): what a quota_set
// carries, so shard 0's allotment of a new epoch is the limit minus it.
func (s *Server) othersUsage(ctx context.Context, prefix string) (nodes, bytes uint64, err error) {
	used := make([][2]uint64, s.cfg.Shards)
	errs := make([]error, s.cfg.Shards)
	var wg sync.WaitGroup
	for shard := 1; shard < s.cfg.Shards; shard++ {
		wg.Go(func() {
			g, err := s.shardGroup(shard)
			if err == nil {
				err = g.Barrier(ctx, api.Linearizable, 0)
			}
			if err != nil {
				errs[shard] = err
				return
			}
			g.View(func(f *fsm.FSM) { used[shard][0], used[shard][1] = f.UsageUnder(prefix) })
		})
	}
	wg.Wait()
	for shard := 1; shard < s.cfg.Shards; shard++ {
		if errs[shard] != nil {
			return 0, 0, errs[shard]
		}
		nodes += used[shard][0]
		bytes += used[shard][1]
	}
	return nodes, bytes, nil
}

// quotaStatus lists the quotas of shard 0's table with their usage summed
// over every shard and, with several shards, each shard's usage and
// allotment, as each shard's replica here has them.
func (s *Server) quotaStatus(quotas []fsm.QuotaUsage) []api.AuthQuota {
	out := make([]api.AuthQuota, 0, len(quotas))
	groups := s.allGroups()
	for _, q := range quotas {
		row := api.AuthQuota{Prefix: q.Prefix, MaxNodes: q.MaxNodes, MaxBytes: q.MaxBytes, Nodes: q.Nodes, Bytes: q.Bytes}
		if s.cfg.Shards > 1 {
			row.Nodes, row.Bytes = 0, 0
			for shard, g := range groups {
				if g == nil {
					continue
				}
				var share fsm.QuotaUsage
				var ok bool
				g.View(func(f *fsm.FSM) { share, ok = f.QuotaShare(q.Prefix) })
				if !ok {
					continue
				}
				row.Nodes += share.Nodes
				row.Bytes += share.Bytes
				row.Shards = append(row.Shards, api.AuthQuotaShard{Shard: shard, Nodes: share.Nodes, Bytes: share.Bytes,
					AllotNodes: share.AllotNodes, AllotBytes: share.AllotBytes})
			}
		}
		out = append(out, row)
	}
	return out
}
