package raftnode

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// app is a MsgApp from 1 to to at term 2 carrying entries first..last (at
// term 2) after prev, with commit.
func app(to, prev, first, last, commit uint64) raftpb.Message {
	m := raftpb.Message{Type: raftpb.MsgApp, From: 1, To: to, Term: 2, Index: prev, LogTerm: 2, Commit: commit}
	for i := first; i <= last; i++ {
		m.Entries = append(m.Entries, raftpb.Entry{Index: i, Term: 2, Data: []byte{byte(i)}})
	}
	return m
}

// TestCoalesceAppends: consecutive MsgApps to a follower that continue one
// another become one with every entry and the last commit; nothing merges
// across a gap, a term, or another message to the same follower, and the
// entries raft handed over are not written.
func TestCoalesceAppends(t *testing.T) {
	first := app(2, 4, 5, 5, 4)
	raftsEntries := append(make([]raftpb.Entry, 0, 2), first.Entries...) // room to append in place: must not be used
	first.Entries = raftsEntries
	msgs := []raftpb.Message{
		first,
		app(3, 4, 5, 5, 4),
		app(2, 5, 6, 7, 5),
		{Type: raftpb.MsgHeartbeat, From: 1, To: 3, Term: 2},
		app(3, 5, 6, 6, 5), // after a heartbeat to 3: stays
		app(2, 7, 8, 8, 6),
		app(2, 9, 10, 10, 6), // a gap: stays
	}
	got := coalesceMessages(msgs)
	want := []struct {
		to, typ     uint64
		first, last uint64
		commit      uint64
	}{
		{2, uint64(raftpb.MsgApp), 5, 8, 6},
		{3, uint64(raftpb.MsgApp), 5, 5, 4},
		{3, uint64(raftpb.MsgHeartbeat), 0, 0, 0},
		{3, uint64(raftpb.MsgApp), 6, 6, 5},
		{2, uint64(raftpb.MsgApp), 10, 10, 6},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		m := got[i]
		if m.To != w.to || uint64(m.Type) != w.typ || m.Commit != w.commit {
			t.Errorf("message %d: to %d type %v commit %d, want to %d type %v commit %d", i, m.To, m.Type, m.Commit, w.to, raftpb.MessageType(w.typ), w.commit)
		}
		if w.first == 0 {
			continue
		}
		if len(m.Entries) == 0 || m.Entries[0].Index != w.first || m.Entries[len(m.Entries)-1].Index != w.last || len(m.Entries) != int(w.last-w.first+1) {
			t.Errorf("message %d carries %v, want entries %d..%d", i, m.Entries, w.first, w.last)
		}
	}
	if spare := raftsEntries[:2]; spare[1].Index != 0 {
		t.Errorf("raft's entry array was written past its length: %v", spare)
	}

	// A merge that would pass raft's message size bound is not made.
	big := bytes.Repeat([]byte("x"), maxCoalescedSize/2+1)
	a, b := app(2, 4, 5, 5, 4), app(2, 5, 6, 6, 5)
	a.Entries[0].Data, b.Entries[0].Data = big, big
	if got := coalesceMessages([]raftpb.Message{a, b}); len(got) != 2 {
		t.Errorf("two MsgApps over the size bound merged into %d", len(got))
	}
}

// commitOnly is an empty MsgApp from 1 to to at term 2 after prev (at term
// 2), with commit: raft's notice that the commit index moved.
func commitOnly(to, prev, commit uint64) raftpb.Message {
	return raftpb.Message{Type: raftpb.MsgApp, From: 1, To: to, Term: 2, Index: prev, LogTerm: 2, Commit: commit}
}

// TestCoalesceCommitOnlyAppends: an empty MsgApp (the commit index moved)
// folds into the MsgApp before it to the same follower that ends where it
// stands, and gives way to a MsgApp after it that starts where it stands,
// which takes its commit; one at another position, of another term, or
// behind another message to the follower stays.
func TestCoalesceCommitOnlyAppends(t *testing.T) {
	otherTerm := commitOnly(3, 7, 7)
	otherTerm.Term = 3
	msgs := []raftpb.Message{
		commitOnly(2, 4, 4),
		app(2, 4, 5, 6, 4),  // starts where the empty one stood: takes its place
		commitOnly(2, 6, 6), // ends where the one before ends: folds in
		commitOnly(3, 4, 4),
		commitOnly(3, 4, 5), // the same position: folds in
		app(3, 5, 6, 6, 5),  // another position: stays
		{Type: raftpb.MsgHeartbeat, From: 1, To: 2, Term: 2},
		commitOnly(2, 6, 7), // behind a heartbeat: stays
		otherTerm,           // another term: stays
	}
	got := coalesceMessages(msgs)
	want := []struct {
		to, typ     uint64
		index       uint64 // the message's position
		first, last uint64 // its entries, 0 if none
		commit      uint64
	}{
		{2, uint64(raftpb.MsgApp), 4, 5, 6, 6},
		{3, uint64(raftpb.MsgApp), 4, 0, 0, 5},
		{3, uint64(raftpb.MsgApp), 5, 6, 6, 5},
		{2, uint64(raftpb.MsgHeartbeat), 0, 0, 0, 0},
		{2, uint64(raftpb.MsgApp), 6, 0, 0, 7},
		{3, uint64(raftpb.MsgApp), 7, 0, 0, 7},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		m := got[i]
		if m.To != w.to || uint64(m.Type) != w.typ || m.Index != w.index || m.Commit != w.commit {
			t.Errorf("message %d: to %d type %v at %d commit %d, want to %d type %v at %d commit %d",
				i, m.To, m.Type, m.Index, m.Commit, w.to, raftpb.MessageType(w.typ), w.index, w.commit)
		}
		if w.first == 0 {
			if len(m.Entries) != 0 {
				t.Errorf("message %d carries %v, want no entries", i, m.Entries)
			}
			continue
		}
		if len(m.Entries) == 0 || m.Entries[0].Index != w.first || m.Entries[len(m.Entries)-1].Index != w.last || len(m.Entries) != int(w.last-w.first+1) {
			t.Errorf("message %d carries %v, want entries %d..%d", i, m.Entries, w.first, w.last)
		}
	}
}

// prop is a MsgProp that follower from forwards to leader 1 with one
// normal entry of data, and ctx as its Context.
func prop(from uint64, data string, ctx []byte) raftpb.Message {
	return raftpb.Message{Type: raftpb.MsgProp, From: from, To: 1, Context: ctx,
		Entries: []raftpb.Entry{{Data: []byte(data)}}}
}

// TestCoalesceForwardedProposals: the proposals a follower forwards in one
// Ready leave as one MsgProp, their entries in order, unless another
// message to the leader comes between them; a deferred proposal (its delay
// in the Context) and a conf change each stay alone; raft's entries are
// not written.
func TestCoalesceForwardedProposals(t *testing.T) {
	first := prop(2, "a", nil)
	raftsEntries := append(make([]raftpb.Entry, 0, 4), first.Entries...) // room to append in place: must not be used
	first.Entries = raftsEntries
	conf := prop(2, "conf", nil)
	conf.Entries[0].Type = raftpb.EntryConfChangeV2
	msgs := []raftpb.Message{
		first,
		prop(2, "b", nil),
		prop(2, "c", nil),
		{Type: raftpb.MsgHeartbeatResp, From: 2, To: 1, Term: 2},
		prop(2, "d", nil), // after another message to the leader: a new one
		prop(2, "e", nil),
		prop(2, "deferred", deferralContext(2*time.Millisecond)),
		prop(2, "f", nil), // after the deferred one: a new one
		conf,
		prop(2, "g", nil),
	}
	got := coalesceMessages(msgs)
	want := [][]string{{"a", "b", "c"}, nil, {"d", "e"}, {"deferred"}, {"f"}, {"conf"}, {"g"}}
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		var data []string
		for _, e := range got[i].Entries {
			data = append(data, string(e.Data))
		}
		if len(data) != len(w) || !slices.Equal(data, w) {
			t.Errorf("message %d (%v) carries %q, want %q", i, got[i].Type, data, w)
		}
	}
	if raftsEntries[:cap(raftsEntries)][1].Data != nil {
		t.Error("a merge wrote into the entries raft handed over")
	}
}
