package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// MemFS is an in-memory FS that remembers what was made durable, so a test
// can simulate a power cut with CrashClone. It is safe for concurrent use.
//
// Directories are simplified: MkdirAll is durable at once. File entries
// follow the rules of the package comment.
type MemFS struct {
	mu sync.Mutex // guards every field below and every memNode's fields
	// live is the namespace the running process sees: cleaned path -> node.
	live map[string]*memNode
	// durable is the namespace a crash would leave: entries as of the last
	// SyncDir of their directory.
	durable map[string]*memNode
	faults  []*faultState
	calls   map[Op]int
	locks   map[string]bool
}

// memNode is an inode. Invariant: synced is a copy of data as of the last Sync.
type memNode struct {
	isDir  bool
	data   []byte
	synced []byte
	// dirtyFrom and dirtyTo bound the bytes of data that may differ from
	// synced; Sync copies only those (a preallocated WAL segment is 64 MiB).
	dirtyFrom, dirtyTo int
}

// markDirty records that data[from:to] may differ from synced.
func (n *memNode) markDirty(from, to int) {
	if n.dirtyFrom >= n.dirtyTo {
		n.dirtyFrom, n.dirtyTo = from, to
		return
	}
	n.dirtyFrom, n.dirtyTo = min(n.dirtyFrom, from), max(n.dirtyTo, to)
}

// NewMem returns an empty crashable in-memory FS.
func NewMem() *MemFS {
	return &MemFS{
		live:    map[string]*memNode{},
		durable: map[string]*memNode{},
		calls:   map[Op]int{},
		locks:   map[string]bool{},
	}
}

// NewCrashable is NewMem, named for what tests use it for.
func NewCrashable() *MemFS { return NewMem() }

// Inject adds a fault; the returned function removes it.
func (m *MemFS) Inject(fault Fault) (remove func()) {
	state := &faultState{Fault: fault}
	m.mu.Lock()
	m.faults = append(m.faults, state)
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for i, other := range m.faults {
			if other == state {
				m.faults = append(m.faults[:i], m.faults[i+1:]...)
				return
			}
		}
	}
}

// CrashAfter lets n more mutating calls through and fails every later one
// with ErrCrashed: the simulated process dies at that call. Follow it with
// CrashClone to get the disk a restart would see.
func (m *MemFS) CrashAfter(n int) {
	m.Inject(Fault{Ops: OpMutating, Skip: n, Err: ErrCrashed})
}

// Calls reports how many calls of the given kinds have been made so far.
func (m *MemFS) Calls(ops Op) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	total := 0
	for op, count := range m.calls {
		if op&ops != 0 {
			total += count
		}
	}
	return total
}

// CrashOptions shape what a crash leaves of unsynced data.
type CrashOptions struct {
	// TornSectors keeps each unsynced 512-byte sector of a file, or leaves
	// it as it was at the last Sync (zero beyond the synced size), at
	// random, and picks the synced or the current size at random. Without
	// it every unsynced byte is dropped.
	TornSectors bool
	// Rand drives TornSectors; required with it.
	Rand *rand.Rand
}

// CrashClone returns a new MemFS holding what a power cut now would leave:
// durable directory entries, and file contents as of their last Sync (see
// CrashOptions). The receiver is unchanged and may keep being used (by a
// "dead" process whose writes go nowhere that matters).
func (m *MemFS) CrashClone(opts CrashOptions) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	clone := NewMem()
	copies := map[*memNode]*memNode{}
	for name, node := range m.durable {
		copied, ok := copies[node]
		if !ok {
			copied = &memNode{isDir: node.isDir}
			copied.data = crashContent(node, opts)
			copied.synced = append([]byte(nil), copied.data...)
			copies[node] = copied
		}
		clone.live[name] = copied
		clone.durable[name] = copied
	}
	return clone
}

func crashContent(node *memNode, opts CrashOptions) []byte {
	if !opts.TornSectors || node.isDir {
		return append([]byte(nil), node.synced...)
	}
	size := len(node.synced)
	if opts.Rand.Intn(2) == 0 {
		size = len(node.data)
	}
	out := make([]byte, size)
	copy(out, node.synced)
	for start := 0; start < size; start += SectorSize {
		end := min(start+SectorSize, size)
		if opts.Rand.Intn(2) == 0 && start < len(node.data) {
			copy(out[start:end], node.data[start:min(end, len(node.data))])
		}
	}
	return out
}

// check counts a call and applies faults. It must be called without m.mu
// held; it sleeps for injected latency and blocks on injected holds.
func (m *MemFS) check(op Op, name string) verdict {
	m.mu.Lock()
	m.calls[op]++
	var out verdict
	for _, state := range m.faults {
		state.applyLocked(op, name, &out)
	}
	m.mu.Unlock()
	out.wait()
	return out
}

func pathError(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// dirExistsLocked reports whether dir is a directory. m.mu must be held.
func (m *MemFS) dirExistsLocked(dir string) bool {
	if dir == "." || dir == "/" || dir == filepath.VolumeName(dir)+string(filepath.Separator) {
		return true
	}
	node, ok := m.live[dir]
	return ok && node.isDir
}

func (m *MemFS) Create(name string) (File, error) {
	name = filepath.Clean(name)
	if v := m.check(OpCreate, name); v.err != nil {
		return nil, pathError("create", name, v.err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirExistsLocked(filepath.Dir(name)) {
		return nil, pathError("create", name, fs.ErrNotExist)
	}
	node, ok := m.live[name]
	if ok && node.isDir {
		return nil, pathError("create", name, fs.ErrExist)
	}
	if ok {
		node.data = nil
	} else {
		node = &memNode{}
		m.live[name] = node
	}
	return &memFile{fs: m, name: name, node: node, writable: true}, nil
}

func (m *MemFS) open(name string, writable bool) (File, error) {
	name = filepath.Clean(name)
	if v := m.check(OpOpen, name); v.err != nil {
		return nil, pathError("open", name, v.err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	node, ok := m.live[name]
	if !ok {
		return nil, pathError("open", name, fs.ErrNotExist)
	}
	if node.isDir && writable {
		return nil, pathError("open", name, fmt.Errorf("is a directory"))
	}
	return &memFile{fs: m, name: name, node: node, writable: writable}, nil
}

func (m *MemFS) Open(name string) (File, error)          { return m.open(name, false) }
func (m *MemFS) OpenReadWrite(name string) (File, error) { return m.open(name, true) }

func (m *MemFS) Remove(name string) error {
	name = filepath.Clean(name)
	if v := m.check(OpRemove, name); v.err != nil {
		return pathError("remove", name, v.err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.live[name]; !ok {
		return pathError("remove", name, fs.ErrNotExist)
	}
	for other := range m.live {
		if filepath.Dir(other) == name {
			return pathError("remove", name, fmt.Errorf("directory not empty"))
		}
	}
	delete(m.live, name)
	return nil
}

func (m *MemFS) Rename(oldname, newname string) error {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	if v := m.check(OpRename, newname); v.err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: v.err}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	node, ok := m.live[oldname]
	if !ok || node.isDir {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	if !m.dirExistsLocked(filepath.Dir(newname)) {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	delete(m.live, oldname)
	m.live[newname] = node
	return nil
}

func (m *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	if v := m.check(OpMkdir, dir); v.err != nil {
		return pathError("mkdir", dir, v.err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for current := dir; !m.dirExistsLocked(current); current = filepath.Dir(current) {
		if node, ok := m.live[current]; ok && !node.isDir {
			return pathError("mkdir", current, fs.ErrExist)
		}
		node := &memNode{isDir: true}
		m.live[current] = node
		m.durable[current] = node
	}
	return nil
}

func (m *MemFS) List(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	if v := m.check(OpList, dir); v.err != nil {
		return nil, pathError("readdir", dir, v.err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirExistsLocked(dir) {
		return nil, pathError("readdir", dir, fs.ErrNotExist)
	}
	var names []string
	for name := range m.live {
		if filepath.Dir(name) == dir && name != dir {
			names = append(names, filepath.Base(name))
		}
	}
	sort.Strings(names)
	return names, nil
}

func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	name = filepath.Clean(name)
	if v := m.check(OpStat, name); v.err != nil {
		return nil, pathError("stat", name, v.err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirExistsLocked(name) {
		return memInfo{name: filepath.Base(name), dir: true}, nil
	}
	node, ok := m.live[name]
	if !ok {
		return nil, pathError("stat", name, fs.ErrNotExist)
	}
	return memInfo{name: filepath.Base(name), size: int64(len(node.data))}, nil
}

// SyncDir makes the live entries of dir durable: new and renamed names
// appear in the durable namespace, removed ones leave it.
func (m *MemFS) SyncDir(dir string) error {
	dir = filepath.Clean(dir)
	if v := m.check(OpSyncDir, dir); v.err != nil {
		return pathError("syncdir", dir, v.err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirExistsLocked(dir) {
		return pathError("syncdir", dir, fs.ErrNotExist)
	}
	for name, node := range m.durable {
		if filepath.Dir(name) == dir && !node.isDir {
			delete(m.durable, name)
		}
	}
	for name, node := range m.live {
		if filepath.Dir(name) == dir && !node.isDir {
			m.durable[name] = node
		}
	}
	return nil
}

// Lock takes an in-process lock on name; the lock is not durable.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	name = filepath.Clean(name)
	if v := m.check(OpLock, name); v.err != nil {
		return nil, pathError("lock", name, v.err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, pathError("lock", name, ErrLocked)
	}
	m.locks[name] = true
	return &memLock{fs: m, name: name}, nil
}

type memLock struct {
	fs   *MemFS
	name string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.fs.mu.Lock()
		delete(l.fs.locks, l.name)
		l.fs.mu.Unlock()
	})
	return nil
}

type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() os.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
