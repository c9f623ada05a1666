package crashfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/latch-io/latch/internal/vfs"
)

// CutReport says what CutToJournal did to a data directory.
type CutReport struct {
	// DroppedBytes counts written bytes past a file's durable length that
	// the cut zeroed or truncated away. Zeros past the last written byte
	// (a preallocated tail) are not counted.
	DroppedBytes int64 `json:"dropped_bytes"`
	// Files are the files whose contents were cut.
	Files []CutFile `json:"files,omitempty"`
	// Removed are files that no directory sync had made durable under any
	// name; RemovedBytes counts the written bytes they held.
	Removed      []string `json:"removed,omitempty"`
	RemovedBytes int64    `json:"removed_bytes,omitempty"`
	// Restored are renames undone, as "from -> to": a file moved back to
	// the name a directory sync had made durable.
	Restored []string `json:"restored,omitempty"`
	// Gone are durable names whose file had already been removed or
	// replaced (its contents are lost to the cut too); they stay absent, as
	// if the removal had reached the disk.
	Gone []string `json:"gone,omitempty"`
	// Torn says unsynced sectors were kept or dropped at random, and a
	// file's size kept or cut back at random (vfs.CrashOptions.TornSectors).
	Torn bool `json:"torn,omitempty"`
}

// CutFile is one file whose unsynced tail was cut.
type CutFile struct {
	Path string `json:"path"`
	// Durable is the length of the file's contents the journal shows
	// durable; Dropped the written bytes after it that the cut removed.
	Durable int64 `json:"durable"`
	Dropped int64 `json:"dropped"`
	// Size is the file's size after the cut.
	Size int64 `json:"size"`
}

// Empty reports whether the cut changed nothing.
func (r CutReport) Empty() bool {
	return r.DroppedBytes == 0 && len(r.Removed) == 0 && len(r.Restored) == 0 && len(r.Gone) == 0
}

func (r CutReport) String() string {
	return fmt.Sprintf("dropped %d unsynced bytes in %d files, removed %d unsynced files (%d bytes), restored %d renamed files, %d durable names gone (torn=%v)",
		r.DroppedBytes, len(r.Files), len(r.Removed), r.RemovedBytes, len(r.Restored), len(r.Gone), r.Torn)
}

// ErrStillRunning is returned by CutToJournal when the journal's process
// still holds one of its locks.
var ErrStillRunning = errors.New("crashfs: the journaled process still runs")

// CutToJournal rewrites the directory tree a vfs.Journal recorded into what
// a power cut at this instant would have left, by the rules of vfs.MemFS's
// CrashClone (see package vfs's comment): a file keeps its contents up to the
// length its last Sync made durable, and later bytes are zeroed (with
// opts.TornSectors each unsynced 512-byte sector is kept or zeroed, and the
// file's size kept or cut back to its synced size, at random); a file stays
// under the names its directory's last SyncDir listed, so a rename that no
// SyncDir followed is undone, and a file no SyncDir listed is removed.
//
// It differs from CrashClone where a file's old bytes are no longer on disk:
// bytes overwritten below the durable length are kept as written, and a
// durable name whose file was removed stays removed. Both are states a power
// cut can leave. The process must be dead (SIGKILL): CutToJournal refuses
// with ErrStillRunning while one of its recorded locks is held. It appends
// the report and a new baseline to the journal, so the restarted process
// continues it.
func CutToJournal(journalPath string, opts vfs.CrashOptions) (CutReport, error) {
	report := CutReport{Torn: opts.TornSectors}
	if opts.TornSectors && opts.Rand == nil {
		return report, errors.New("crashfs: cut: TornSectors needs Rand")
	}
	records, size, err := readJournal(journalPath)
	if err != nil {
		return report, err
	}
	if err := vfs.DropTornRecord(journalPath, size); err != nil {
		return report, err
	}
	model, err := replay(records)
	if err != nil {
		return report, fmt.Errorf("crashfs: cut %s: %w", journalPath, err)
	}
	if err := model.checkUnlocked(); err != nil {
		return report, err
	}
	disk, err := vfs.ListJournalTree(vfs.OS(), model.root)
	if err != nil {
		return report, err
	}
	model.reconcile(disk)
	plan := model.place(disk)
	report.Gone = plan.gone
	if err := plan.apply(&report); err != nil {
		return report, err
	}
	for _, ino := range plan.order {
		state := model.inodes[ino]
		cut, err := cutContent(plan.claimed[ino], state.durableLen, state.durableSize, opts)
		if err != nil {
			return report, err
		}
		if cut.Dropped > 0 {
			report.Files = append(report.Files, cut)
			report.DroppedBytes += cut.Dropped
		}
	}
	encoded, err := json.Marshal(report)
	if err != nil {
		return report, fmt.Errorf("crashfs: cut: encode the report: %w", err)
	}
	return report, vfs.AppendCut(journalPath, model.root, encoded)
}

// readJournal parses the journal's records and returns them with the
// journal's size. A last line without its newline is an append the kill cut
// short and is ignored; any other malformed line is an error naming its
// offset.
func readJournal(path string) ([]vfs.JournalRecord, int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("crashfs: read journal: %w", err)
	}
	var records []vfs.JournalRecord
	for offset := 0; offset < len(data); {
		end := bytes.IndexByte(data[offset:], '\n')
		if end < 0 {
			break
		}
		var record vfs.JournalRecord
		if err := json.Unmarshal(data[offset:offset+end], &record); err != nil {
			return nil, 0, fmt.Errorf("crashfs: journal %s: record at offset %d: %w", path, offset, err)
		}
		record.Offset = int64(offset)
		records = append(records, record)
		offset += end + 1
	}
	return records, int64(len(data)), nil
}

// cutModel is what the journal says is durable, replayed from its last
// baseline.
type cutModel struct {
	root   string
	inodes map[uint64]*inodeState
	// durable maps a directory to the regular files its last sync listed.
	durable map[string]map[string]inodeRef
	locks   map[string]bool // lock files, which a cut leaves alone
}

// inodeState is one inode number's current file. A removed file's number
// may be reused by a new file: that is a new generation.
type inodeState struct {
	generation int
	unlinked   bool // the file was removed (or replaced by a rename)
	// durableLen and durableSize are the contents' length and the file's
	// size as of its last sync.
	durableLen, durableSize int64
}

// inodeRef names one generation of an inode.
type inodeRef struct {
	ino        uint64
	generation int
}

func replay(records []vfs.JournalRecord) (*cutModel, error) {
	last := -1
	for i, record := range records {
		if record.Op == vfs.RecordBaseline {
			last = i
		}
	}
	if last < 0 {
		return nil, errors.New("journal has no baseline record")
	}
	model := &cutModel{
		root:    records[last].Path,
		inodes:  map[uint64]*inodeState{},
		durable: map[string]map[string]inodeRef{},
		locks:   map[string]bool{},
	}
	for _, record := range records[last:] {
		if err := model.apply(record); err != nil {
			return nil, fmt.Errorf("record at offset %d: %w", record.Offset, err)
		}
	}
	return model, nil
}

func (m *cutModel) apply(record vfs.JournalRecord) error {
	switch record.Op {
	case vfs.RecordBaseline:
		for _, entry := range record.Entries {
			state := m.newGeneration(entry.Ino)
			state.durableLen, state.durableSize = entry.Size, entry.Size
			m.setDurable(entry.Path, inodeRef{entry.Ino, state.generation})
		}
	case vfs.RecordStart:
		m.reconcile(record.Entries)
	case vfs.RecordCreate:
		if state := m.inodes[record.Ino]; state != nil && !state.unlinked {
			state.durableLen, state.durableSize = 0, 0 // O_TRUNC of the same file
		} else {
			m.newGeneration(record.Ino)
		}
	case vfs.RecordSync:
		m.applySync(record)
	case vfs.RecordSyncDir:
		names := map[string]inodeRef{}
		for _, entry := range record.Entries {
			names[entry.Name] = inodeRef{entry.Ino, m.current(entry.Ino).generation}
		}
		m.durable[record.Path] = names
	case vfs.RecordRename:
		if state := m.inodes[record.Replaced]; record.Replaced != record.Ino && state != nil {
			state.unlinked = true
		}
	case vfs.RecordRemove:
		if state := m.inodes[record.Ino]; state != nil {
			state.unlinked = true
		}
	case vfs.RecordLock:
		m.locks[record.Path] = true
	case vfs.RecordCut:
	default:
		return fmt.Errorf("unknown journal record %q", record.Op)
	}
	return nil
}

func (m *cutModel) applySync(record vfs.JournalRecord) {
	state := m.inodes[record.Ino]
	if state != nil && state.unlinked {
		return // a removed file's contents matter to no name
	}
	state = m.current(record.Ino)
	if record.Exact {
		state.durableLen, state.durableSize = record.Len, record.Size
		return
	}
	state.durableLen = max(state.durableLen, record.Len)
	state.durableSize = max(state.durableSize, record.Size)
}

// current returns the inode's live generation, a new one with nothing
// durable if the model had it as removed or never saw it.
func (m *cutModel) current(ino uint64) *inodeState {
	if state := m.inodes[ino]; state != nil && !state.unlinked {
		return state
	}
	return m.newGeneration(ino)
}

func (m *cutModel) newGeneration(ino uint64) *inodeState {
	state := m.inodes[ino]
	if state == nil {
		state = &inodeState{}
		m.inodes[ino] = state
	}
	state.generation++
	state.unlinked, state.durableLen, state.durableSize = false, 0, 0
	return state
}

func (m *cutModel) setDurable(path string, ref inodeRef) {
	dir, name := filepath.Split(path)
	dir = filepath.Clean(dir)
	if m.durable[dir] == nil {
		m.durable[dir] = map[string]inodeRef{}
	}
	m.durable[dir][name] = ref
}

// reconcile brings the model in line with the files on disk, which may
// differ after a kill cut off a record: a file missing from disk was
// removed; a file the model did not have (or had as removed) is new.
func (m *cutModel) reconcile(files []vfs.JournalEntry) {
	present := map[uint64]bool{}
	for _, file := range files {
		present[file.Ino] = true
	}
	for ino, state := range m.inodes {
		if !present[ino] {
			state.unlinked = true
		}
	}
	for _, file := range files {
		m.current(file.Ino)
	}
}

// checkUnlocked returns ErrStillRunning if a recorded lock file is locked.
func (m *cutModel) checkUnlocked() error {
	for path := range m.locks {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		lock, err := vfs.OS().Lock(path)
		if errors.Is(err, vfs.ErrLocked) {
			return fmt.Errorf("%w: %s is locked", ErrStillRunning, path)
		}
		if err != nil {
			return fmt.Errorf("crashfs: cut: %w", err)
		}
		lock.Close()
	}
	return nil
}

// cutPlan is where each file on disk ends up.
type cutPlan struct {
	disk    map[uint64]string // inode -> its path on disk now
	claimed map[uint64]string // inode -> the path it keeps or returns to
	order   []uint64          // claimed inodes, by path
	gone    []string
	locks   map[string]bool
}

// place gives every durable name the file it durably holds, if that file is
// still on disk; a durable name whose file is gone keeps the file now there,
// if no other name claims it (the replacement reached the disk).
func (m *cutModel) place(files []vfs.JournalEntry) *cutPlan {
	plan := &cutPlan{disk: map[uint64]string{}, claimed: map[uint64]string{}, locks: m.locks}
	at := map[string]uint64{}
	for _, file := range files {
		plan.disk[file.Ino] = file.Path
		at[file.Path] = file.Ino
	}
	var unresolved []string
	for _, path := range m.durablePaths() {
		dir, name := filepath.Split(path)
		ref := m.durable[filepath.Clean(dir)][name]
		state := m.inodes[ref.ino]
		_, onDisk := plan.disk[ref.ino]
		_, taken := plan.claimed[ref.ino]
		if state != nil && !state.unlinked && state.generation == ref.generation && onDisk && !taken {
			plan.claimed[ref.ino] = path
			continue
		}
		unresolved = append(unresolved, path)
	}
	for _, path := range unresolved {
		ino, ok := at[path]
		if _, taken := plan.claimed[ino]; ok && !taken {
			plan.claimed[ino] = path
			continue
		}
		plan.gone = append(plan.gone, path)
	}
	for ino := range plan.claimed {
		plan.order = append(plan.order, ino)
	}
	sort.Slice(plan.order, func(a, b int) bool { return plan.claimed[plan.order[a]] < plan.claimed[plan.order[b]] })
	return plan
}

// durablePaths lists the durable names under the root, sorted.
func (m *cutModel) durablePaths() []string {
	var paths []string
	for dir, names := range m.durable {
		for name := range names {
			if path := filepath.Join(dir, name); within(m.root, path) && path != m.root {
				paths = append(paths, path)
			}
		}
	}
	sort.Strings(paths)
	return paths
}

// apply removes the files no name claims and moves the others to their
// names, through temporary names so that moves may swap names.
func (p *cutPlan) apply(report *CutReport) error {
	var unclaimed []string
	for ino, path := range p.disk {
		if _, ok := p.claimed[ino]; !ok && !p.locks[path] {
			unclaimed = append(unclaimed, path)
		}
	}
	sort.Strings(unclaimed)
	for _, path := range unclaimed {
		written, err := writtenBytes(path)
		if err != nil {
			return err
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("crashfs: cut: %w", err)
		}
		report.Removed = append(report.Removed, path)
		report.RemovedBytes += written
	}
	type move struct{ from, temp, to string }
	var moves []move
	for _, ino := range p.order {
		from, to := p.disk[ino], p.claimed[ino]
		if from == to {
			continue
		}
		temp := filepath.Join(filepath.Dir(to), fmt.Sprintf(".latch-cut-%d", ino))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return fmt.Errorf("crashfs: cut: %w", err)
		}
		if err := os.Rename(from, temp); err != nil {
			return fmt.Errorf("crashfs: cut: %w", err)
		}
		moves = append(moves, move{from, temp, to})
	}
	for _, m := range moves {
		if err := os.Rename(m.temp, m.to); err != nil {
			return fmt.Errorf("crashfs: cut: %w", err)
		}
		report.Restored = append(report.Restored, m.from+" -> "+m.to)
	}
	return nil
}

// cutContent zeroes (or, torn, zeroes some sectors of) the file's bytes
// past durableLen and cuts its size back to durableSize.
func cutContent(path string, durableLen, durableSize int64, opts vfs.CrashOptions) (CutFile, error) {
	result := CutFile{Path: path, Durable: durableLen}
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return result, fmt.Errorf("crashfs: cut: %w", err)
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return result, fmt.Errorf("crashfs: cut: %w", err)
	}
	size := info.Size()
	result.Size = size
	if durableLen >= size {
		return result, nil
	}
	written, err := writtenRegions(file, durableLen, size)
	if err != nil {
		return result, fmt.Errorf("crashfs: cut %s: %w", path, err)
	}
	newSize := size
	if keepSize := opts.TornSectors && opts.Rand.Intn(2) == 0; !keepSize {
		newSize = min(size, max(durableSize, durableLen))
	}
	for _, region := range written {
		zeroed, err := zeroSectors(file, region.start, min(region.end, newSize), opts)
		if err != nil {
			return result, fmt.Errorf("crashfs: cut %s: %w", path, err)
		}
		result.Dropped += zeroed
	}
	if newSize < size {
		if err := file.Truncate(newSize); err != nil {
			return result, fmt.Errorf("crashfs: cut: %w", err)
		}
		for _, region := range written {
			result.Dropped += max(0, region.end-max(region.start, newSize))
		}
		result.Size = newSize
	}
	return result, nil
}

// writtenBytes counts the written bytes of the file at path.
func writtenBytes(path string) (int64, error) {
	file, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("crashfs: cut: %w", err)
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return 0, fmt.Errorf("crashfs: cut: %w", err)
	}
	regions, err := writtenRegions(file, 0, info.Size())
	if err != nil {
		return 0, fmt.Errorf("crashfs: cut %s: %w", path, err)
	}
	var total int64
	for _, region := range regions {
		total += region.end - region.start
	}
	return total, nil
}

// span is the byte range [start, end) of a file.
type span struct{ start, end int64 }

// writtenRegions returns the regions of the file in [from, to) that hold
// written bytes: each region the filesystem says may hold data, up to its
// last non-zero byte. Holes are not read: a 64 MiB preallocated WAL segment
// is mostly hole.
func writtenRegions(file *os.File, from, to int64) ([]span, error) {
	const chunk = 1 << 20
	buf := make([]byte, chunk)
	var regions []span
	for offset := from; offset < to; {
		start, end := dataRegion(file, offset, to)
		written := start
		for at := start; at < end; at += chunk {
			n, err := file.ReadAt(buf[:min(chunk, end-at)], at)
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			if last := lastNonZero(buf[:n]); last >= 0 {
				written = at + int64(last) + 1
			}
			if n == 0 {
				break
			}
		}
		if start < written {
			regions = append(regions, span{start, written})
		}
		offset = max(end, offset+1)
	}
	return regions, nil
}

// zeroSectors zeroes [from, to) of the file, or with opts.TornSectors each
// 512-byte sector's part of it at random, and returns how many bytes it
// zeroed.
func zeroSectors(file *os.File, from, to int64, opts vfs.CrashOptions) (int64, error) {
	var zeroed int64
	runStart, runEnd := from, from // the run of sectors to zero next
	for sector := from / vfs.SectorSize * vfs.SectorSize; sector < to; sector += vfs.SectorSize {
		partEnd := min(sector+vfs.SectorSize, to)
		if opts.TornSectors && opts.Rand.Intn(2) == 0 {
			// This sector reached the disk: zero the run before it.
			if err := writeZeros(file, runStart, runEnd); err != nil {
				return zeroed, err
			}
			zeroed += runEnd - runStart
			runStart, runEnd = partEnd, partEnd
			continue
		}
		runEnd = partEnd
	}
	if err := writeZeros(file, runStart, runEnd); err != nil {
		return zeroed, err
	}
	return zeroed + runEnd - runStart, nil
}

func writeZeros(file *os.File, from, to int64) error {
	zeros := make([]byte, min(to-from, 1<<20))
	for at := from; at < to; at += int64(len(zeros)) {
		if _, err := file.WriteAt(zeros[:min(int64(len(zeros)), to-at)], at); err != nil {
			return err
		}
	}
	return nil
}

func lastNonZero(data []byte) int {
	return len(bytes.TrimRight(data, "\x00")) - 1
}

// within reports whether path is dir or below it (both clean and absolute).
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
