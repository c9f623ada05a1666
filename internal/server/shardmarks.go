package server

import (
	"context"
	"time"

	"github.com/latch-io/latch/internal/fsm"
)

// Step 4 of the wiring: closing marks left behind. A delete that stopped
// after its mark (its server crashed, or a step timed out) leaves the
// directory closing, which refuses creates under it. Each member, for the
// shards it leads, lists the marks every few seconds and finishes those it
// has seen for longer than a request timeout: the close, then the delete or
// the unmark (finishClose), which may race the original server harmlessly.

// markKey names one closing mark of one shard.
type markKey struct {
	shard int
	path  string
	mark  uint64
}

// runMarkFinisher finishes the marks left behind in the shards this member
// leads, until the server stops.
func (s *Server) runMarkFinisher() {
	ticker := s.cfg.Clock.NewTicker(2 * s.electionTimeout())
	defer ticker.Stop()
	seen := map[markKey]time.Time{}
	for {
		select {
		case <-ticker.C():
		case <-s.stop:
			return
		}
		s.finishOldMarks(seen)
	}
}

// finishOldMarks updates seen with the marks of the shards led here and
// finishes those older than a request timeout.
func (s *Server) finishOldMarks(seen map[markKey]time.Time) {
	now := s.cfg.Clock.Now()
	current := map[markKey]fsm.ClosingDirectory{}
	for shard, g := range s.allGroups() {
		if g == nil || g.Leader() != s.id {
			continue
		}
		var marks []fsm.ClosingDirectory
		g.View(func(f *fsm.FSM) { marks = f.ClosingDirectories() })
		for _, m := range marks {
			current[markKey{shard: shard, path: m.Path, mark: m.Mark}] = m
		}
	}
	for key := range seen {
		if _, ok := current[key]; !ok {
			delete(seen, key)
		}
	}
	for key, m := range current {
		first, ok := seen[key]
		if !ok {
			seen[key] = now
			continue
		}
		if now.Sub(first) < s.cfg.RequestTimeout {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		_, _, err := s.finishClose(ctx, m.Path, m.Mark, m.Incarnation)
		cancel()
		if err != nil {
			s.log.Info("finishing a delete left behind failed; retrying", "path", m.Path, "mark", m.Mark, "err", err)
		}
	}
}
