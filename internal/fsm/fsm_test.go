package fsm

import (
	"reflect"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// applyCase is one rule of Apply: setup commands (applied at indexes 1..n,
// each must succeed), then cmd at index n+1.
type applyCase struct {
	name     string
	setup    []command.Command
	cmd      command.Command
	wantCode api.Code // "" = success
	wantNode NodeMeta // checked when Path is set
	// wantEvents is checked on success unless nil; Index is filled in.
	wantEvents []Event
	check      func(t *testing.T, h *harness)
}

func runApplyCases(t *testing.T, tests []applyCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			for _, c := range tt.setup {
				h.mustApply(c)
			}
			before := h.f.Clone()
			result, events := h.apply(tt.cmd)
			if got := codeOf(result.Err); got != tt.wantCode {
				t.Fatalf("code %q (%v), want %q", got, result.Err, tt.wantCode)
			}
			if h.f.Applied() != h.index {
				t.Errorf("Applied() = %d, want %d", h.f.Applied(), h.index)
			}
			if tt.wantCode != "" {
				checkRefusal(t, before, h, events)
			} else {
				checkEvents(t, events, tt.wantEvents, h.index)
			}
			if tt.wantNode.Path != "" && result.Node != tt.wantNode {
				t.Errorf("result node %+v, want %+v", result.Node, tt.wantNode)
			}
			if err := checkInvariants(h.f); err != nil {
				t.Errorf("invariants: %v", err)
			}
			if tt.check != nil {
				tt.check(t, h)
			}
		})
	}
}

// checkRefusal checks that a refused command changed nothing but the
// applied index and emitted no events.
func checkRefusal(t *testing.T, before *FSM, h *harness, events []Event) {
	t.Helper()
	if len(events) != 0 {
		t.Errorf("a refusal emitted events %v", events)
	}
	before.Advance(h.index)
	if before.Hash() != h.f.Hash() {
		t.Errorf("a refusal changed the state:\nbefore\n%s\nafter\n%s", tree(before), tree(h.f))
	}
}

func checkEvents(t *testing.T, got, want []Event, index uint64) {
	t.Helper()
	for i := range want {
		want[i].Index = index
	}
	if want == nil || len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events\n got %v\nwant %v", got, want)
	}
}

func ev(kind EventKind, path string, version uint64) Event {
	return Event{Kind: kind, Path: path, Version: version}
}

func wantNode(path string, wantValue string, version, created, modified uint64) func(*testing.T, *harness) {
	return func(t *testing.T, h *harness) {
		t.Helper()
		n, err := h.f.Get(path)
		if err != nil {
			t.Fatalf("Get(%q): %v", path, err)
		}
		want := NodeMeta{Path: path, Version: version, CreatedIndex: created, ModifiedIndex: modified}
		if n.NodeMeta != want || string(n.Value) != wantValue {
			t.Errorf("Get(%q) = %+v %q, want %+v %q", path, n.NodeMeta, n.Value, want, wantValue)
		}
	}
}

func wantMissing(paths ...string) func(*testing.T, *harness) {
	return func(t *testing.T, h *harness) {
		t.Helper()
		for _, p := range paths {
			if _, err := h.f.Get(p); codeOf(err) != api.CodeNotFound {
				t.Errorf("Get(%q) = %v, want not_found", p, err)
			}
		}
	}
}

func all(checks ...func(*testing.T, *harness)) func(*testing.T, *harness) {
	return func(t *testing.T, h *harness) {
		t.Helper()
		for _, c := range checks {
			c(t, h)
		}
	}
}

func TestPut(t *testing.T) {
	longName := "/" + strings.Repeat("n", api.MaxPathLen-5) + "-"
	runApplyCases(t, []applyCase{
		{
			name: "create under root", cmd: put("/a", "v"),
			wantNode:   NodeMeta{"/a", 1, 1, 1},
			wantEvents: []Event{ev(EventCreated, "/a", 1), ev(EventChildrenChanged, "/", 0)},
			check:      wantNode("/a", "v", 1, 1, 1),
		},
		{
			name: "update bumps version and modified index", setup: []command.Command{put("/a", "x"), noop()}, cmd: put("/a", "y"),
			wantNode:   NodeMeta{"/a", 2, 1, 3},
			wantEvents: []Event{ev(EventChanged, "/a", 2)},
			check:      wantNode("/a", "y", 2, 1, 3),
		},
		{
			name: "missing ancestors are created like mkdir -p", setup: []command.Command{put("/a", "x")}, cmd: put("/a/b/c/d", "v"),
			wantNode: NodeMeta{"/a/b/c/d", 1, 2, 2},
			wantEvents: []Event{
				ev(EventCreated, "/a/b", 1), ev(EventChildrenChanged, "/a", 1),
				ev(EventCreated, "/a/b/c", 1), ev(EventChildrenChanged, "/a/b", 1),
				ev(EventCreated, "/a/b/c/d", 1), ev(EventChildrenChanged, "/a/b/c", 1),
			},
			check: all(wantNode("/a/b", "", 1, 2, 2), wantNode("/a/b/c", "", 1, 2, 2), wantNode("/a", "x", 1, 1, 1)),
		},
		{
			name:     "prev_version none creates a missing node",
			cmd:      command.Command{Op: command.OpPut, Path: "/a", Precondition: command.PrecondNone},
			wantNode: NodeMeta{"/a", 1, 1, 1}, wantEvents: []Event{ev(EventCreated, "/a", 1), ev(EventChildrenChanged, "/", 0)},
		},
		{
			name: "prev_version none refuses an existing node", setup: []command.Command{put("/a", "x")},
			cmd:      command.Command{Op: command.OpPut, Path: "/a", Precondition: command.PrecondNone},
			wantCode: api.CodePreconditionFailed,
		},
		{
			name: "prev_version matching", setup: []command.Command{put("/a", "x")}, cmd: putVersion("/a", "y", 1),
			wantNode: NodeMeta{"/a", 2, 1, 2}, wantEvents: []Event{ev(EventChanged, "/a", 2)},
		},
		{
			name: "prev_version mismatch", setup: []command.Command{put("/a", "x"), put("/a", "y")}, cmd: putVersion("/a", "z", 1),
			wantCode: api.CodePreconditionFailed,
		},
		{
			name: "prev_version 0 creates a missing node", cmd: putVersion("/a", "y", 0),
			wantNode: NodeMeta{"/a", 1, 1, 1}, wantEvents: []Event{ev(EventCreated, "/a", 1), ev(EventChildrenChanged, "/", 0)},
		},
		{
			name: "prev_version N on a missing node", cmd: putVersion("/a", "y", 3),
			wantCode: api.CodePreconditionFailed,
		},
		{
			name: "sequential appends the parent's counter", setup: []command.Command{putSequential("/q/lock-")}, cmd: putSequential("/q/lock-"),
			wantNode:   NodeMeta{"/q/lock-0000000002", 1, 2, 2},
			wantEvents: []Event{ev(EventCreated, "/q/lock-0000000002", 1), ev(EventChildrenChanged, "/q", 1)},
			check:      wantNode("/q/lock-0000000001", "", 1, 1, 1), // /q, made at index 1, counts from 1
		},
		{
			name: "sequential counter is per parent", setup: []command.Command{putSequential("/q/a-"), putSequential("/q/a-")}, cmd: putSequential("/r/a-"),
			wantNode: NodeMeta{"/r/a-0000000003", 1, 3, 3},
			wantEvents: []Event{
				ev(EventCreated, "/r", 1), ev(EventChildrenChanged, "/", 0),
				ev(EventCreated, "/r/a-0000000003", 1), ev(EventChildrenChanged, "/r", 1),
			},
		},
		{
			name: "sequential counter is shared by all names under a parent", setup: []command.Command{putSequential("/q/a-")}, cmd: putSequential("/q/b-"),
			wantNode: NodeMeta{"/q/b-0000000002", 1, 2, 2},
		},
		{
			name: "plain creates do not advance the counter", setup: []command.Command{putSequential("/q/a-"), put("/q/x", "")}, cmd: putSequential("/q/a-"),
			wantNode: NodeMeta{"/q/a-0000000002", 1, 3, 3},
		},
		{
			name: "sequential names taken by plain nodes are skipped", setup: []command.Command{put("/q", ""), put("/q/a-0000000001", ""), put("/q/a-0000000002", "")},
			cmd: putSequential("/q/a-"), wantNode: NodeMeta{"/q/a-0000000003", 1, 4, 4},
			check: func(t *testing.T, h *harness) {
				r := h.mustApply(putSequential("/q/b-"))
				if r.Node.Path != "/q/b-0000000004" {
					t.Errorf("next sequential create made %q, want /q/b-0000000004 (the counter moved past the skipped names)", r.Node.Path)
				}
			},
		},
		{
			name: "a name taken under another prefix is not skipped", setup: []command.Command{put("/q", ""), put("/q/b-0000000001", "")},
			cmd: putSequential("/q/a-"), wantNode: NodeMeta{"/q/a-0000000001", 1, 3, 3},
		},
		{
			name:  "a recreated parent never reuses a sequential name",
			setup: []command.Command{putSequential("/q/a-"), putSequential("/q/a-"), putSequential("/q/a-"), delRecursive("/q")},
			cmd:   putSequential("/q/a-"), wantNode: NodeMeta{"/q/a-0000000005", 1, 5, 5},
		},
		{
			name: "version 1: a sequential name taken by a plain node is refused", setup: []command.Command{legacy(put("/q/a-0000000000", ""))}, cmd: legacy(putSequential("/q/a-")),
			wantCode: api.CodePreconditionFailed,
		},
		{
			name: "version 1: a new parent counts from 0", setup: []command.Command{legacy(putSequential("/q/a-")), legacy(delRecursive("/q"))},
			cmd: legacy(putSequential("/q/a-")), wantNode: NodeMeta{"/q/a-0000000000", 1, 3, 3},
			check: func(t *testing.T, h *harness) {
				r := h.mustApply(legacy(putSequential("/q/a-")))
				if r.Node.Path != "/q/a-0000000001" {
					t.Errorf("next version 1 sequential create made %q, want /q/a-0000000001", r.Node.Path)
				}
			},
		},
		{
			name: "version 1: a plain parent counts from 0", setup: []command.Command{legacy(put("/q", ""))},
			cmd: legacy(putSequential("/q/a-")), wantNode: NodeMeta{"/q/a-0000000000", 1, 2, 2},
		},
		{name: "sequential root", cmd: putSequential("/"), wantCode: api.CodeInvalidArgument},
		{name: "sequential path over the limit", cmd: putSequential(longName), wantCode: api.CodeInvalidArgument},
		{name: "empty segment", cmd: put("/a//b", ""), wantCode: api.CodeInvalidArgument},
		{name: "relative path", cmd: put("a", ""), wantCode: api.CodeInvalidArgument},
		{name: "trailing slash", cmd: put("/a/", ""), wantCode: api.CodeInvalidArgument},
		{name: "dot-dot segment", cmd: put("/a/../b", ""), wantCode: api.CodeInvalidArgument},
		{
			name: "value of the root", cmd: put("/", "r"),
			wantNode: NodeMeta{"/", 1, 0, 1}, wantEvents: []Event{ev(EventChanged, "/", 1)},
		},
		{name: "ephemeral root", setup: []command.Command{createSession(1000)}, cmd: putEphemeral("/", "", 1), wantCode: api.CodeInvalidArgument},
	})
}

func TestEphemeral(t *testing.T) {
	sessionAndNode := []command.Command{createSession(1000), putEphemeral("/e", "x", 1)}
	runApplyCases(t, []applyCase{
		{
			name: "ephemeral with a live session", setup: []command.Command{createSession(1000)}, cmd: putEphemeral("/l/e", "v", 1),
			wantNode: NodeMeta{"/l/e", 1, 2, 2},
			check: func(t *testing.T, h *harness) {
				n, _ := h.f.Get("/l/e")
				s, _ := h.f.Session(1)
				if n.Owner != 1 || s.Ephemerals != 1 {
					t.Errorf("owner %d, session ephemerals %d; want 1 and 1", n.Owner, s.Ephemerals)
				}
				if parent, _ := h.f.Get("/l"); parent.Owner != 0 {
					t.Errorf("ancestor /l made ephemeral")
				}
			},
		},
		{name: "ephemeral without a session", cmd: command.Command{Op: command.OpPut, Path: "/e", Ephemeral: true}, wantCode: api.CodeInvalidArgument},
		{name: "ephemeral of an unknown session", cmd: putEphemeral("/e", "", 99), wantCode: api.CodeSessionExpired},
		{name: "ephemeral of a closed session", setup: []command.Command{createSession(1000), closeSession(1)}, cmd: putEphemeral("/e", "", 1), wantCode: api.CodeSessionExpired},
		{name: "persistent write on behalf of an unknown session", cmd: withSeq(put("/p", ""), 99, 0), wantCode: api.CodeSessionExpired},
		{name: "delete on behalf of an unknown session", setup: []command.Command{put("/p", "")}, cmd: withSeq(del("/p"), 99, 1), wantCode: api.CodeSessionExpired},
		{name: "child of an ephemeral node", setup: sessionAndNode, cmd: put("/e/c", ""), wantCode: api.CodeInvalidArgument},
		{name: "mkdir -p through an ephemeral node", setup: sessionAndNode, cmd: put("/e/c/d", ""), wantCode: api.CodeInvalidArgument},
		{name: "sequential child of an ephemeral node", setup: sessionAndNode, cmd: putSequential("/e/s-"), wantCode: api.CodeInvalidArgument},
		{name: "ephemeral over a persistent node", setup: []command.Command{createSession(1000), put("/p", "")}, cmd: putEphemeral("/p", "", 1), wantCode: api.CodePreconditionFailed},
		{name: "ephemeral over another session's node", setup: []command.Command{createSession(1000), createSession(1000), putEphemeral("/e", "", 1)}, cmd: putEphemeral("/e", "", 2), wantCode: api.CodePreconditionFailed},
		{
			name: "owner updates its ephemeral node", setup: sessionAndNode, cmd: putEphemeral("/e", "y", 1),
			wantNode: NodeMeta{"/e", 2, 2, 3}, wantEvents: []Event{ev(EventChanged, "/e", 2)},
		},
		{
			name: "persistent write to an ephemeral node keeps its owner", setup: sessionAndNode, cmd: put("/e", "y"),
			wantNode: NodeMeta{"/e", 2, 2, 3},
			check: func(t *testing.T, h *harness) {
				if n, _ := h.f.Get("/e"); n.Owner != 1 {
					t.Errorf("owner %d, want 1", n.Owner)
				}
			},
		},
		{
			name: "sequential ephemeral lock node", setup: []command.Command{createSession(1000), put("/locks/R", "")},
			cmd:      command.Command{Op: command.OpPut, Path: "/locks/R/lock-", Ephemeral: true, Sequential: true, SessionID: 1},
			wantNode: NodeMeta{"/locks/R/lock-0000000002", 1, 3, 3},
		},
	})
}

func TestDelete(t *testing.T) {
	runApplyCases(t, []applyCase{
		{name: "missing node", cmd: del("/a"), wantCode: api.CodeNotFound},
		{name: "invalid path", cmd: del("/a/"), wantCode: api.CodeInvalidArgument},
		{
			name: "leaf", setup: []command.Command{put("/a", ""), put("/a", "")}, cmd: del("/a"),
			wantNode:   NodeMeta{"/a", 2, 1, 2},
			wantEvents: []Event{ev(EventDeleted, "/a", 2), ev(EventChildrenChanged, "/", 0)},
			check: all(wantMissing("/a"), func(t *testing.T, h *harness) {
				if root, _ := h.f.Get("/"); root.ChildrenCount != 0 {
					t.Errorf("root has %d children", root.ChildrenCount)
				}
			}),
		},
		{name: "node with children", setup: []command.Command{put("/a/b", "")}, cmd: del("/a"), wantCode: api.CodePreconditionFailed},
		{
			name: "recursive deletes the subtree, descendants first", setup: []command.Command{put("/a/b/c", ""), put("/a/d", ""), put("/ab", ""), put("/a/b0", "")},
			cmd: delRecursive("/a"),
			wantEvents: []Event{
				ev(EventDeleted, "/a/d", 1), ev(EventDeleted, "/a/b0", 1), ev(EventDeleted, "/a/b/c", 1), ev(EventDeleted, "/a/b", 1),
				ev(EventDeleted, "/a", 1), ev(EventChildrenChanged, "/", 0),
			},
			check: all(wantMissing("/a", "/a/b", "/a/b/c", "/a/d", "/a/b0"), wantNode("/ab", "", 1, 3, 3)),
		},
		{
			name: "recursive on a leaf", setup: []command.Command{put("/a/b", "")}, cmd: delRecursive("/a/b"),
			wantEvents: []Event{ev(EventDeleted, "/a/b", 1), ev(EventChildrenChanged, "/a", 1)},
		},
		{name: "root", cmd: del("/"), wantCode: api.CodeInvalidArgument},
		{name: "root recursively", setup: []command.Command{put("/a", "")}, cmd: delRecursive("/"), wantCode: api.CodeInvalidArgument},
		{
			name: "matching version", setup: []command.Command{put("/a", "")},
			cmd:        command.Command{Op: command.OpDelete, Path: "/a", Precondition: command.PrecondVersion, Version: 1},
			wantEvents: []Event{ev(EventDeleted, "/a", 1), ev(EventChildrenChanged, "/", 0)},
		},
		{
			name: "version mismatch", setup: []command.Command{put("/a", "")},
			cmd:      command.Command{Op: command.OpDelete, Path: "/a", Precondition: command.PrecondVersion, Version: 2},
			wantCode: api.CodePreconditionFailed,
		},
		{
			name: "prev_version none", setup: []command.Command{put("/a", "")},
			cmd:      command.Command{Op: command.OpDelete, Path: "/a", Precondition: command.PrecondNone},
			wantCode: api.CodePreconditionFailed,
		},
		{
			name: "ephemeral node leaves the owner index", setup: []command.Command{createSession(1000), putEphemeral("/e", "", 1)}, cmd: delAs(del("/e"), 1),
			wantEvents: []Event{ev(EventDeleted, "/e", 1), ev(EventChildrenChanged, "/", 0)},
			check: func(t *testing.T, h *harness) {
				if s, _ := h.f.Session(1); s.Ephemerals != 0 {
					t.Errorf("session still counts %d ephemerals", s.Ephemerals)
				}
				if _, events := h.apply(closeSession(1)); len(events) != 0 {
					t.Errorf("closing the session deleted again: %v", events)
				}
			},
		},
		{
			name: "recursive delete of ephemeral nodes", setup: []command.Command{createSession(1000), putEphemeral("/d/e", "", 1), putEphemeral("/d/f", "", 1)},
			cmd: delAs(delRecursive("/d"), 1),
			check: func(t *testing.T, h *harness) {
				if s, _ := h.f.Session(1); s.Ephemerals != 0 {
					t.Errorf("session still counts %d ephemerals", s.Ephemerals)
				}
			},
			wantEvents: []Event{ev(EventDeleted, "/d/f", 1), ev(EventDeleted, "/d/e", 1), ev(EventDeleted, "/d", 1), ev(EventChildrenChanged, "/", 0)},
		},
		{
			name: "another session's ephemeral node is refused", setup: []command.Command{createSession(1000), createSession(1000), putEphemeral("/e", "", 1)},
			cmd: delAs(del("/e"), 2), wantCode: api.CodePreconditionFailed,
		},
		{
			name: "an ephemeral node without a session is refused", setup: []command.Command{createSession(1000), putEphemeral("/e", "", 1)},
			cmd: del("/e"), wantCode: api.CodePreconditionFailed,
		},
		{
			name: "a recursive delete over another session's ephemeral node is refused", setup: []command.Command{createSession(1000), put("/d/p", "x"), putEphemeral("/d/e", "", 1)},
			cmd: delRecursive("/d"), wantCode: api.CodePreconditionFailed,
			check: func(t *testing.T, h *harness) {
				if _, err := h.f.Get("/d/p"); err != nil {
					t.Errorf("the refused delete removed /d/p: %v", err)
				}
			},
		},
		{
			name: "version 1: anyone deletes an ephemeral node", setup: []command.Command{createSession(1000), putEphemeral("/e", "", 1)},
			cmd: legacy(del("/e")), wantEvents: []Event{ev(EventDeleted, "/e", 1), ev(EventChildrenChanged, "/", 0)},
		},
	})
}

func TestSessions(t *testing.T) {
	runApplyCases(t, []applyCase{
		{
			name: "create: the id is the entry's index", setup: []command.Command{noop(), noop()}, cmd: createSession(5000),
			check: func(t *testing.T, h *harness) {
				s, err := h.f.Session(3)
				if err != nil || s != (Session{ID: 3, TimeoutMs: 5000}) {
					t.Errorf("Session(3) = %+v, %v", s, err)
				}
			},
		},
		{
			name: "close deletes the session's ephemeral nodes",
			setup: []command.Command{createSession(1000), createSession(1000), putEphemeral("/l/b", "", 1), putEphemeral("/l/a", "", 1),
				putEphemeral("/m", "", 1), put("/l/c", ""), putEphemeral("/l/d", "", 2)},
			cmd: closeSession(1),
			wantEvents: []Event{
				ev(EventDeleted, "/l/a", 1), ev(EventChildrenChanged, "/l", 1),
				ev(EventDeleted, "/l/b", 1), ev(EventChildrenChanged, "/l", 1),
				ev(EventDeleted, "/m", 1), ev(EventChildrenChanged, "/", 0),
			},
			check: all(wantMissing("/l/a", "/l/b", "/m"), func(t *testing.T, h *harness) {
				if _, err := h.f.Session(1); codeOf(err) != api.CodeNotFound {
					t.Errorf("Session(1) after close: %v", err)
				}
				if names, _ := h.f.Children("/l"); !reflect.DeepEqual(names, []string{"c", "d"}) {
					t.Errorf("children of /l = %v", names)
				}
			}),
		},
		{name: "close an unknown session", cmd: closeSession(7), wantCode: api.CodeSessionExpired},
		{name: "close twice", setup: []command.Command{createSession(1000), closeSession(1)}, cmd: closeSession(1), wantCode: api.CodeSessionExpired},
		{
			name:  "expire several sessions in one entry, in the command's order",
			setup: []command.Command{createSession(1), createSession(2), createSession(3), putEphemeral("/a", "", 1), putEphemeral("/b", "", 3)},
			cmd:   command.Command{Op: command.OpSessionExpire, Sessions: []uint64{3, 99, 1}},
			wantEvents: []Event{
				ev(EventDeleted, "/b", 1), ev(EventChildrenChanged, "/", 0),
				ev(EventDeleted, "/a", 1), ev(EventChildrenChanged, "/", 0),
			},
			check: func(t *testing.T, h *harness) {
				if got := h.f.Sessions(); !reflect.DeepEqual(got, []Session{{ID: 2, TimeoutMs: 2}}) {
					t.Errorf("Sessions() = %+v", got)
				}
			},
		},
		{name: "expire an unknown session is a no-op", setup: []command.Command{createSession(1)}, cmd: command.Command{Op: command.OpSessionExpire, Sessions: []uint64{42}}, wantEvents: []Event{}},
		{name: "write after expiry", setup: []command.Command{createSession(1), {Op: command.OpSessionExpire, Sessions: []uint64{1}}}, cmd: withSeq(put("/a", ""), 1, 1), wantCode: api.CodeSessionExpired},
	})
}

func TestSessionsSortedAndReads(t *testing.T) {
	h := newHarness(t)
	for range 5 {
		h.mustApply(createSession(100))
	}
	h.mustApply(closeSession(3))
	var ids []uint64
	for _, s := range h.f.Sessions() {
		ids = append(ids, s.ID)
	}
	if !reflect.DeepEqual(ids, []uint64{1, 2, 4, 5}) || h.f.SessionCount() != 4 {
		t.Errorf("Sessions() ids = %v, count %d", ids, h.f.SessionCount())
	}
	if _, err := h.f.Get("/x//"); codeOf(err) != api.CodeInvalidArgument {
		t.Errorf("Get of an invalid path: %v", err)
	}
	if _, err := h.f.Children("/nope"); codeOf(err) != api.CodeNotFound {
		t.Errorf("Children of a missing node: %v", err)
	}
}

func TestChildren(t *testing.T) {
	h := newHarness(t)
	for _, p := range []string{"/a/b/c", "/a/b0", "/a/b/d", "/a/a", "/a/b-", "/a/b 1", "/ab", "/a/c/x/y/z", "/b"} {
		h.mustApply(put(p, ""))
	}
	tests := []struct {
		path string
		want []string
	}{
		{"/", []string{"a", "ab", "b"}},
		{"/a", []string{"a", "b", "b 1", "b-", "b0", "c"}},
		{"/a/b", []string{"c", "d"}},
		{"/a/c/x/y/z", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := h.f.Children(tt.path)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Children(%q) = %q, %v; want %q", tt.path, got, err, tt.want)
			}
		})
	}
}

func TestMembers(t *testing.T) {
	h := newHarness(t)
	set := func(id uint64, name string) command.Command {
		return command.Command{Op: command.OpMemberSet, Member: command.Member{ID: id, Name: name, PeerURL: "http://" + name}}
	}
	remove := func(id uint64) command.Command {
		return command.Command{Op: command.OpMemberRemove, Member: command.Member{ID: id}}
	}
	steps := []struct {
		name  string
		cmd   command.Command
		names []string
	}{
		{"add", set(30, "c"), []string{"c"}},
		{"add lower id", set(10, "a"), []string{"a", "c"}},
		{"add middle id", set(20, "b"), []string{"a", "b", "c"}},
		{"replace", set(20, "b2"), []string{"a", "b2", "c"}},
		{"remove", remove(10), []string{"b2", "c"}},
		{"remove unknown", remove(99), []string{"b2", "c"}},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			h.mustApply(step.cmd)
			var names []string
			for _, m := range h.f.Members() {
				names = append(names, m.Name)
			}
			if !reflect.DeepEqual(names, step.names) {
				t.Errorf("members %v, want %v", names, step.names)
			}
			listed := map[uint64]command.Member{}
			for _, m := range h.f.Members() {
				listed[m.ID] = m
			}
			for _, id := range []uint64{10, 20, 30, 99} {
				m, ok := h.f.Member(id)
				if want, listedOK := listed[id]; ok != listedOK || m != want {
					t.Errorf("Member(%d) = %+v, %v; want %+v, %v", id, m, ok, want, listedOK)
				}
			}
		})
	}
}

func TestApplyIndex(t *testing.T) {
	h := newHarness(t)
	h.mustApply(noop())
	h.f.Advance(5)
	h.f.Advance(3) // ignored
	if h.f.Applied() != 5 {
		t.Fatalf("Applied() = %d, want 5", h.f.Applied())
	}
	defer func() {
		if recover() == nil {
			t.Errorf("Apply at an old index did not panic")
		}
	}()
	h.f.Apply(5, &command.Command{Op: command.OpNoop})
}

func TestEventKindString(t *testing.T) {
	tests := map[EventKind]string{
		EventCreated: api.EventCreated, EventChanged: api.EventChanged,
		EventDeleted: api.EventDeleted, EventChildrenChanged: api.EventChildrenChanged,
		EventKind(9): "EventKind(9)",
	}
	for kind, want := range tests {
		if kind.String() != want {
			t.Errorf("%d.String() = %q, want %q", kind, kind.String(), want)
		}
	}
}

func enqueue(path string, session uint64) command.Command {
	return command.Command{Op: command.OpEnqueue, Path: path, Value: []byte("me"), Ephemeral: true, Sequential: true, SessionID: session}
}

func TestEnqueue(t *testing.T) {
	twoSessions := []command.Command{createSession(1000), createSession(1000)}
	runApplyCases(t, []applyCase{
		{
			name: "first join creates an ephemeral sequential node", setup: twoSessions, cmd: enqueue("/locks/R/lock-", 1),
			wantNode: NodeMeta{"/locks/R/lock-0000000003", 1, 3, 3},
			check: func(t *testing.T, h *harness) {
				if n, _ := h.f.Get("/locks/R/lock-0000000003"); n.Owner != 1 || string(n.Value) != "me" {
					t.Errorf("node %+v", n)
				}
			},
		},
		{
			name: "a second join of the session returns its place", setup: append(twoSessions, enqueue("/locks/R/lock-", 2), enqueue("/locks/R/lock-", 1)),
			cmd: enqueue("/locks/R/lock-", 1), wantNode: NodeMeta{"/locks/R/lock-0000000004", 1, 4, 4}, wantEvents: []Event{},
			check: func(t *testing.T, h *harness) {
				if names, _ := h.f.Children("/locks/R"); len(names) != 2 {
					t.Errorf("queue %v, want two nodes", names)
				}
			},
		},
		{
			name: "another session queues behind", setup: append(twoSessions, enqueue("/locks/R/lock-", 1)),
			cmd: enqueue("/locks/R/lock-", 2), wantNode: NodeMeta{"/locks/R/lock-0000000004", 1, 4, 4},
		},
		{
			name: "the session's node in another queue does not count", setup: append(twoSessions, enqueue("/locks/Q/lock-", 1), enqueue("/locks/R0/lock-", 1)),
			cmd: enqueue("/locks/R/lock-", 1), wantNode: NodeMeta{"/locks/R/lock-0000000005", 1, 5, 5},
		},
		{
			name: "a plain ephemeral node with the prefix does not count", setup: append(twoSessions, putEphemeral("/locks/R/lock-x", "", 1)),
			cmd: enqueue("/locks/R/lock-", 1), wantNode: NodeMeta{"/locks/R/lock-0000000003", 1, 4, 4},
		},
		{
			name: "after release the session joins again at the end", setup: append(twoSessions, enqueue("/locks/R/lock-", 1), delAs(del("/locks/R/lock-0000000003"), 1)),
			cmd: enqueue("/locks/R/lock-", 1), wantNode: NodeMeta{"/locks/R/lock-0000000004", 1, 5, 5},
		},
		{
			name: "a second join with a new value updates the node", setup: append(twoSessions, enqueue("/locks/R/lock-", 1)),
			cmd: withValue(enqueue("/locks/R/lock-", 1), "new"), wantNode: NodeMeta{"/locks/R/lock-0000000003", 2, 3, 4},
			wantEvents: []Event{ev(EventChanged, "/locks/R/lock-0000000003", 2)},
			check:      wantNode("/locks/R/lock-0000000003", "new", 2, 3, 4),
		},
		{
			name: "version 1: a second join with a new value changes nothing", setup: append(twoSessions, enqueue("/locks/R/lock-", 1)),
			cmd: legacy(withValue(enqueue("/locks/R/lock-", 1), "new")), wantNode: NodeMeta{"/locks/R/lock-0000000003", 1, 3, 3}, wantEvents: []Event{},
			check: wantNode("/locks/R/lock-0000000003", "me", 1, 3, 3),
		},
		{name: "without a session", cmd: enqueue("/locks/R/lock-", 0), wantCode: api.CodeInvalidArgument},
		{name: "with an expired session", cmd: enqueue("/locks/R/lock-", 7), wantCode: api.CodeSessionExpired},
		{name: "invalid path", setup: twoSessions, cmd: enqueue("/locks//lock-", 1), wantCode: api.CodeInvalidArgument},
	})
}

// legacy marks c as decoded from command format version 1.
func legacy(c command.Command) command.Command {
	c.Format = command.FormatV1
	return c
}

func withValue(c command.Command, value string) command.Command {
	c.Value = []byte(value)
	return c
}
