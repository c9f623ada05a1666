package raftnode

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestRoutineRaftInfoIsDebug: raft's line about a second append response
// for an index already stable (routine with asynchronous storage writes)
// is logged at Debug, any other Info line at Info.
func TestRoutineRaftInfoIsDebug(t *testing.T) {
	var buf bytes.Buffer
	l := raftLogger{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	l.Infof("entry at index %d missing from unstable log; ignoring", 12)
	if buf.Len() != 0 {
		t.Fatalf("routine line logged at Info: %q", buf.String())
	}
	l.Infof("%x became leader at term %d", 1, 2)
	if !strings.Contains(buf.String(), "became leader at term 2") {
		t.Fatalf("other Info line not logged: %q", buf.String())
	}
}
