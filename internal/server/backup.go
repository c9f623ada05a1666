package server

import (
	"context"
	"fmt"
	"io"

	"github.com/latch-io/latch/internal/backup"
)

// Backup is a consistent copy of this member's state, every group's state
// machine cloned at one applied index, ready to be streamed as a backup file
// (internal/backup) by Stream. Taking it costs O(groups); writing it does
// not hold any lock, so apply goes on meanwhile.
type Backup struct {
	header   backup.Header
	sections []backup.Section
}

// TakeBackup clones the state of every group, each after a barrier at
// opts' consistency: with a linearizable one (the default), every write
// acknowledged anywhere before the call is in the backup.
func (s *Server) TakeBackup(ctx context.Context, opts ReadOptions) (*Backup, error) {
	if err := s.authorizeAs(ctx, permAdmin, "/", 0); err != nil {
		return nil, err
	}
	b := &Backup{header: backup.Header{
		TokenHash:     backup.TokenHash(s.cfg.ClusterToken),
		TakenAtUnixMs: uint64(s.cfg.Clock.Now().UnixMilli()),
		Member:        s.cfg.Name,
	}}
	for _, g := range s.backupGroups() {
		if err := g.Barrier(ctx, opts.Consistency, opts.minIndexIn(g)); err != nil {
			return nil, fmt.Errorf("server: backup of group %d: %w", g.Group(), err)
		}
		state, term := g.CloneState()
		b.header.Shards = append(b.header.Shards, backup.Shard{
			Group: g.Group(), Index: state.Applied(), Term: term,
			NodeCount: uint64(state.NodeCount()), SessionCount: uint64(state.SessionCount()),
		})
		b.sections = append(b.sections, backup.Section{Group: g.Group(), WriteBody: state.WriteSnapshot})
	}
	return b, nil
}

// backupGroups are the groups a backup holds, in group order: every group
// this member runs, one per shard.
func (s *Server) backupGroups() []*group {
	var groups []*group
	for _, g := range s.allGroups() {
		if g != nil {
			groups = append(groups, g)
		}
	}
	return groups
}

// Index is the highest applied index of the backup's groups.
func (b *Backup) Index() uint64 { return b.header.MaxIndex() }

// Stream writes the backup file to w.
func (b *Backup) Stream(w io.Writer) error { return backup.Write(w, b.header, b.sections) }
