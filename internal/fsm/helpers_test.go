package fsm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// harness applies commands at consecutive indexes.
type harness struct {
	t     testing.TB
	f     *FSM
	index uint64
}

func newHarness(t testing.TB) *harness { return &harness{t: t, f: New()} }

func (h *harness) apply(c command.Command) (Result, []Event) {
	h.index++
	return h.f.Apply(h.index, &c)
}

// mustApply applies c and fails the test if it is refused.
func (h *harness) mustApply(c command.Command) Result {
	h.t.Helper()
	r, _ := h.apply(c)
	if r.Err != nil {
		h.t.Fatalf("apply %+v at %d: %v", c, h.index, r.Err)
	}
	return r
}

func put(path, value string) command.Command {
	return command.Command{Op: command.OpPut, Path: path, Value: []byte(value)}
}

func putEphemeral(path, value string, session uint64) command.Command {
	return command.Command{Op: command.OpPut, Path: path, Value: []byte(value), Ephemeral: true, SessionID: session}
}

func putSequential(path string) command.Command {
	return command.Command{Op: command.OpPut, Path: path, Sequential: true}
}

func putVersion(path, value string, version uint64) command.Command {
	return command.Command{Op: command.OpPut, Path: path, Value: []byte(value), Precondition: command.PrecondVersion, Version: version}
}

func del(path string) command.Command { return command.Command{Op: command.OpDelete, Path: path} }

func delRecursive(path string) command.Command {
	return command.Command{Op: command.OpDelete, Path: path, Recursive: true}
}

// delAs is a delete made on behalf of session.
func delAs(c command.Command, session uint64) command.Command {
	c.SessionID = session
	return c
}

func createSession(timeoutMs uint64) command.Command {
	return command.Command{Op: command.OpSessionCreate, TimeoutMs: timeoutMs}
}

func closeSession(id uint64) command.Command {
	return command.Command{Op: command.OpSessionClose, SessionID: id}
}

func noop() command.Command { return command.Command{Op: command.OpNoop} }

// withSeq makes c an exactly-once write of session at seq.
func withSeq(c command.Command, session, seq uint64) command.Command {
	c.SessionID, c.RequestSeq = session, seq
	return c
}

func codeOf(err error) api.Code {
	if err == nil {
		return ""
	}
	return api.CodeOf(err)
}

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := f.WriteSnapshot(&buf); err != nil {
		t.Fatalf("WriteSnapshot: %v", err)
	}
	return buf.Bytes()
}

func restore(t testing.TB, data []byte) *FSM {
	t.Helper()
	f, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("ReadSnapshot: %v", err)
	}
	return f
}

// checkNodeCache verifies nodeCache's invariant: every filled slot holds
// the entry the tree holds for its path, data and all, in its path's set,
// and no path is in two slots.
func checkNodeCache(f *FSM) error {
	if f.cache == nil {
		return nil
	}
	seen := map[string]int{}
	for i, cached := range f.cache.slots {
		if cached.nodeData == nil {
			continue
		}
		if h, set := f.cache.index(cached.path); set != i&^1 || h != cached.hash {
			return fmt.Errorf("node cache: %q is in slot %d with hash %x, not its own", cached.path, i, cached.hash)
		}
		if j, ok := seen[cached.path]; ok {
			return fmt.Errorf("node cache: %q is in slots %d and %d", cached.path, j, i)
		}
		seen[cached.path] = i
		stored, ok := f.nodes.Get(entry{path: cached.path})
		switch {
		case !ok:
			return fmt.Errorf("node cache: holds %q, which the tree does not", cached.path)
		case stored.nodeData != cached.nodeData:
			return fmt.Errorf("node cache: holds other data for %q than the tree (version %d, the tree's %d)", cached.path, cached.version, stored.version)
		}
	}
	return nil
}

// checkInvariants verifies the package's invariants from scratch.
func checkInvariants(f *FSM) error {
	if _, ok := f.lookup("/"); !ok {
		return errors.New("no root")
	}
	if err := checkNodeCache(f); err != nil {
		return err
	}
	children := map[string]int{}
	owned := map[uint64]int{}
	var errs []error
	f.nodes.Scan(func(e entry) bool {
		if e.path == "/" {
			return true
		}
		parent, ok := f.lookup(api.Parent(e.path))
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%q has no parent", e.path))
		case parent.owner != 0:
			errs = append(errs, fmt.Errorf("%q is the child of ephemeral %q", e.path, parent.path))
		}
		children[api.Parent(e.path)]++
		if e.owner != 0 {
			owned[e.owner]++
			if _, ok := f.owners.Get(ownerKey{owner: e.owner, path: e.path}); !ok {
				errs = append(errs, fmt.Errorf("ephemeral %q missing from the owner index", e.path))
			}
			if _, ok := f.sessions.Get(session{id: e.owner}); !ok {
				errs = append(errs, fmt.Errorf("ephemeral %q of dead session %d", e.path, e.owner))
			}
		}
		return true
	})
	f.nodes.Scan(func(e entry) bool {
		if e.children != children[e.path] {
			errs = append(errs, fmt.Errorf("%q counts %d children, has %d", e.path, e.children, children[e.path]))
		}
		return true
	})
	total := 0
	f.sessions.Scan(func(s session) bool {
		if s.ephemerals != owned[s.id] {
			errs = append(errs, fmt.Errorf("session %d counts %d ephemerals, owns %d", s.id, s.ephemerals, owned[s.id]))
		}
		total += s.ephemerals
		return true
	})
	if f.owners.Len() != total {
		errs = append(errs, fmt.Errorf("owner index has %d entries, sessions own %d", f.owners.Len(), total))
	}
	return errors.Join(errs...)
}

// tree renders every node as "path=value v<version> c<created> m<modified> [o<owner>] [s<sequence>]".
func tree(f *FSM) string {
	var b strings.Builder
	f.nodes.Scan(func(e entry) bool {
		fmt.Fprintf(&b, "%s=%s v%d c%d m%d", e.path, e.value, e.version, e.created, e.modified)
		if e.owner != 0 {
			fmt.Fprintf(&b, " o%d", e.owner)
		}
		if e.sequence != 0 {
			fmt.Fprintf(&b, " s%d", e.sequence)
		}
		if e.hasTimes() {
			fmt.Fprintf(&b, " t%d/%d cv%d p%d", e.ctime, e.mtime, e.cversion, e.pzxid)
		}
		b.WriteByte('\n')
		return true
	})
	return b.String()
}

func bufioWriter(w io.Writer) *bufio.Writer { return bufio.NewWriter(w) }
