package wal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/vfs"
)

// scriptSegmentSize is the default segment size of scripts: small, so that a
// few saves span segments.
const scriptSegmentSize = 4096

// TestReaderScripts runs scripted golden tests of what Open makes of crafted logs, in the style of
// raft's testdata/*.txt and pebble's wal/testdata/reader. Each file in
// testdata/reader is a script run against a fresh in-memory filesystem; run
// with -rewrite to regenerate the expected output after a deliberate change.
//
// Commands (file=N names segment sequence N, or "last" for the newest):
//
//	open [segment-size=N]   Open; prints the log lines it wrote (repairs),
//	                        the files it changed, and per group the snapshot
//	                        marker, hard state and entries, or its error.
//	close                   Close the open WAL.
//	roll                    close and open, printing only the new segment.
//	crash                   Drop the open WAL and keep only what was fsynced.
//	save [group=G] [entries=A-B] [term=T] [hardstate=T,V,C]
//	     [marker=I,T[,installed]] [size=N] [fill=zero]
//	                        One Save of one batch; with input lines, one Save
//	                        of one batch per line (same keys). size pads each
//	                        entry's data to N bytes (fill=zero pads with
//	                        zeros). Prints where the flush landed.
//	release group=G index=I Release; prints the segments it removed.
//	ls                      Segment files: size, and where the valid records end.
//	dump file=N             Every record of a segment with its offset.
//	corrupt file=N offset=X [bits=0x01]   XOR one byte.
//	zero file=N from=X to=Y               Zero bytes [X, Y).
//	truncate file=N size=X | drop-last=K  Cut the file (drop-last: K bytes
//	                                      before the end of the records).
//	undo                                  Undo the last of those three.
//	remove file=N
//	rename file=N to=M
//
// An offset X is a number or an anchor with an optional +K or -K: end (the
// end of the valid records), first-flush, last-flush, last-record (the last
// record of the last flush), recN (record #N as dump numbers them, the
// segment header being #0), sector(X) rounds down to a 512-byte sector.
func TestReaderScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/reader", func(t *testing.T, path string) {
		script := newReaderScript()
		defer script.closeQuietly()
		datadriven.RunTest(t, path, script.run)
	})
}

// entryKey names an entry version: the data saved for it is known.
type entryKey struct{ group, index, term uint64 }

// readerScript is the state of one script: a filesystem, the WAL open on it
// (or nil), and the data every saved entry was given.
type readerScript struct {
	fs          *vfs.MemFS
	wal         *WAL
	segmentSize int64
	logs        bytes.Buffer
	logger      *slog.Logger
	saved       map[entryKey][]byte
	// undo is the segment the last damage command changed, as it was.
	undo struct {
		name string
		data []byte
	}
}

func newReaderScript() *readerScript {
	script := &readerScript{fs: vfs.NewMem(), segmentSize: scriptSegmentSize, saved: map[entryKey][]byte{}}
	if err := script.fs.MkdirAll(testDir, 0o755); err != nil {
		panic(err) // an empty in-memory filesystem cannot fail this
	}
	dropTime := func(groups []string, attr slog.Attr) slog.Attr {
		if attr.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return attr
	}
	script.logger = slog.New(slog.NewTextHandler(&script.logs, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: dropTime}))
	return script
}

func (s *readerScript) closeQuietly() {
	if s.wal != nil {
		s.wal.Close()
		s.wal = nil
	}
}

func (s *readerScript) run(t *testing.T, d *datadriven.TestData) string {
	commands := map[string]func(*testing.T, *datadriven.TestData) string{
		"open": s.open, "close": s.close, "roll": s.roll, "crash": s.crash,
		"save": s.save, "release": s.release, "ls": s.ls, "dump": s.dump,
		"corrupt": s.corrupt, "zero": s.zero, "truncate": s.truncate, "remove": s.remove,
		"undo": s.undoDamage, "rename": s.rename,
	}
	command, ok := commands[d.Cmd]
	if !ok {
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	return command(t, d)
}

// argument returns a command argument's values joined by commas, so that
// key=1,2 and key=(1, 2) read the same.
func argument(args []datadriven.CmdArg, key string) (string, bool) {
	for _, arg := range args {
		if arg.Key == key {
			return strings.Join(arg.Vals, ","), true
		}
	}
	return "", false
}

func parseUints(t *testing.T, text string, count int) []uint64 {
	t.Helper()
	fields := strings.Split(text, ",")
	if len(fields) < count {
		t.Fatalf("%q: want %d numbers", text, count)
	}
	values := make([]uint64, count)
	for i := range values {
		value, err := strconv.ParseUint(strings.TrimSpace(fields[i]), 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		values[i] = value
	}
	return values
}

func (s *readerScript) open(t *testing.T, d *datadriven.TestData) string {
	if s.wal != nil {
		d.Fatalf(t, "open: the WAL is already open (close it first)")
	}
	d.MaybeScanArgs(t, "segment-size", &s.segmentSize)
	before := s.fileSizes(t)
	s.logs.Reset()
	w, states, err := Open(s.fs, testDir, Options{SegmentSize: s.segmentSize, Logger: s.logger})
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(s.logs.String()), "\n") {
		if line != "" {
			fmt.Fprintf(&out, "log: %s\n", strings.ReplaceAll(line, testDir+"/", ""))
		}
	}
	fresh := ""
	if sequences := s.sequences(t); err == nil && len(sequences) > 0 {
		fresh = segmentName(sequences[len(sequences)-1]) // the segment Open started
	}
	changes := s.fileChanges(t, before, fresh)
	out.WriteString(changes)
	if err != nil {
		var corrupt *CorruptError
		fmt.Fprintf(&out, "error: %v\n", err)
		if errors.As(err, &corrupt) {
			fmt.Fprintf(&out, "corrupt: errors.Is(ErrCorrupt)=%t file=%s offset=%d\n",
				errors.Is(err, ErrCorrupt), filepath.Base(corrupt.File), corrupt.Offset)
		}
		return out.String()
	}
	s.wal = w
	groups := make([]uint64, 0, len(states))
	for group := range states {
		groups = append(groups, group)
	}
	slices.Sort(groups)
	if len(groups) == 0 {
		out.WriteString("no groups\n")
	}
	for _, group := range groups {
		out.WriteString(s.describeGroup(group, states[group]))
	}
	return out.String()
}

// describeGroup prints a group's state on one line, entries as runs of
// consecutive indexes of one term, and flags any entry whose data is not
// what was saved for it.
func (s *readerScript) describeGroup(group uint64, state *GroupState) string {
	var out strings.Builder
	fmt.Fprintf(&out, "group %d: snapshot %d@%d, hard state term=%d vote=%d commit=%d, entries",
		group, state.Snapshot.Index, state.Snapshot.Term, state.HardState.Term, state.HardState.Vote, state.HardState.Commit)
	if len(state.Entries) == 0 {
		out.WriteString(" none")
	}
	for i := 0; i < len(state.Entries); {
		j := i + 1
		for j < len(state.Entries) && state.Entries[j].Term == state.Entries[i].Term && state.Entries[j].Index == state.Entries[j-1].Index+1 {
			j++
		}
		if j-i == 1 {
			fmt.Fprintf(&out, " %d@%d", state.Entries[i].Index, state.Entries[i].Term)
		} else {
			fmt.Fprintf(&out, " %d-%d@%d", state.Entries[i].Index, state.Entries[j-1].Index, state.Entries[i].Term)
		}
		i = j
	}
	out.WriteString("\n")
	for _, entry := range state.Entries {
		want, ok := s.saved[entryKey{group, entry.Index, entry.Term}]
		if !ok || !bytes.Equal(want, entry.Data) {
			fmt.Fprintf(&out, "  !! entry %d@%d has data %q, not what was saved\n", entry.Index, entry.Term, entry.Data)
		}
	}
	return out.String()
}

func (s *readerScript) close(t *testing.T, d *datadriven.TestData) string {
	if s.wal == nil {
		d.Fatalf(t, "close: the WAL is not open")
	}
	err := s.wal.Close()
	s.wal = nil
	if err != nil {
		return fmt.Sprintf("error: %v\n", err)
	}
	return "ok\n"
}

func (s *readerScript) roll(t *testing.T, d *datadriven.TestData) string {
	if s.wal == nil {
		d.Fatalf(t, "roll: the WAL is not open")
	}
	if err := s.wal.Close(); err != nil {
		return fmt.Sprintf("error: close: %v\n", err)
	}
	s.wal = nil
	w, _, err := Open(s.fs, testDir, Options{SegmentSize: s.segmentSize, Logger: s.logger})
	if err != nil {
		return fmt.Sprintf("error: open: %v\n", err)
	}
	s.wal = w
	sequences := s.sequences(t)
	return fmt.Sprintf("writing %s\n", segmentName(sequences[len(sequences)-1]))
}

func (s *readerScript) crash(t *testing.T, d *datadriven.TestData) string {
	s.fs = s.fs.CrashClone(vfs.CrashOptions{})
	s.wal = nil // the dead process's WAL writes to the old filesystem
	return "ok\n"
}

func (s *readerScript) save(t *testing.T, d *datadriven.TestData) string {
	if s.wal == nil {
		d.Fatalf(t, "save: the WAL is not open")
	}
	var batches []Batch
	if strings.TrimSpace(d.Input) == "" {
		batches = append(batches, s.parseBatch(t, d.CmdArgs))
	}
	for _, line := range strings.Split(d.Input, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		_, args, err := datadriven.ParseLine("batch " + line)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		batches = append(batches, s.parseBatch(t, args))
	}
	if err := s.wal.Save(batches...); err != nil {
		return fmt.Sprintf("error: %v\n", err)
	}
	for _, batch := range batches {
		for _, entry := range batch.Entries {
			s.saved[entryKey{batch.Group, entry.Index, entry.Term}] = entry.Data
		}
	}
	sequences := s.sequences(t)
	name := segmentName(sequences[len(sequences)-1])
	layout := walkSegment(s.read(t, name))
	if len(layout.flushes) == 0 {
		return "ok\n"
	}
	last := layout.flushes[len(layout.flushes)-1]
	return fmt.Sprintf("flush %s [%d, %d)\n", name, last, layout.end)
}

func (s *readerScript) parseBatch(t *testing.T, args []datadriven.CmdArg) Batch {
	batch := Batch{Group: 1}
	term := uint64(1)
	if value, ok := argument(args, "group"); ok {
		batch.Group = parseUints(t, value, 1)[0]
	}
	if value, ok := argument(args, "term"); ok {
		term = parseUints(t, value, 1)[0]
	}
	if value, ok := argument(args, "hardstate"); ok {
		fields := parseUints(t, value, 3)
		batch.HardState = raftpb.HardState{Term: fields[0], Vote: fields[1], Commit: fields[2]}
	}
	if value, ok := argument(args, "marker"); ok {
		fields := parseUints(t, value, 2)
		batch.Snapshot = &SnapshotMarker{Index: fields[0], Term: fields[1], Installed: strings.HasSuffix(value, ",installed")}
	}
	size := 0
	if value, ok := argument(args, "size"); ok {
		size = int(parseUints(t, value, 1)[0])
	}
	filler := byte('.')
	if value, _ := argument(args, "fill"); value == "zero" {
		filler = 0
	}
	if value, ok := argument(args, "entries"); ok {
		from, to, found := strings.Cut(value, "-")
		if !found {
			to = from
		}
		first, last := parseUints(t, from, 1)[0], parseUints(t, to, 1)[0]
		for index := first; index <= last; index++ {
			data := []byte(fmt.Sprintf("g%d-i%d-t%d", batch.Group, index, term))
			for len(data) < size {
				data = append(data, filler)
			}
			batch.Entries = append(batch.Entries, raftpb.Entry{Index: index, Term: term, Data: data})
		}
	}
	return batch
}

func (s *readerScript) release(t *testing.T, d *datadriven.TestData) string {
	if s.wal == nil {
		d.Fatalf(t, "release: the WAL is not open")
	}
	var group, index uint64
	d.ScanArgs(t, "group", &group)
	d.ScanArgs(t, "index", &index)
	before := s.fileSizes(t)
	if err := s.wal.Release(group, index); err != nil {
		return fmt.Sprintf("error: %v\n", err)
	}
	if changes := s.fileChanges(t, before, ""); changes != "" {
		return changes
	}
	return "nothing released\n"
}

func (s *readerScript) sequences(t *testing.T) []uint64 {
	sequences, err := listSegments(s.fs, testDir)
	if err != nil {
		t.Fatal(err)
	}
	return sequences
}

func (s *readerScript) fileSizes(t *testing.T) map[string]int64 {
	sizes := map[string]int64{}
	for _, sequence := range s.sequences(t) {
		name := segmentName(sequence)
		info, err := s.fs.Stat(filepath.Join(testDir, name))
		if err != nil {
			t.Fatal(err)
		}
		sizes[name] = info.Size()
	}
	return sizes
}

// fileChanges describes how the segment files differ from before. fresh,
// if not empty, names a file known to be newly created, which may reuse the
// name of one that was removed.
func (s *readerScript) fileChanges(t *testing.T, before map[string]int64, fresh string) string {
	after := s.fileSizes(t)
	names := make([]string, 0, len(before)+len(after))
	for name := range before {
		names = append(names, name)
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out strings.Builder
	for _, name := range names {
		old, existed := before[name]
		size, exists := after[name]
		switch {
		case name == fresh && existed:
			fmt.Fprintf(&out, "re-created %s (was %d bytes)\n", name, old)
		case !existed:
			fmt.Fprintf(&out, "created %s\n", name)
		case !exists:
			fmt.Fprintf(&out, "removed %s\n", name)
		case old != size:
			fmt.Fprintf(&out, "truncated %s from %d to %d bytes\n", name, old, size)
		}
	}
	return out.String()
}

func (s *readerScript) ls(t *testing.T, d *datadriven.TestData) string {
	var out strings.Builder
	for _, sequence := range s.sequences(t) {
		name := segmentName(sequence)
		data := s.read(t, name)
		layout := walkSegment(data)
		fmt.Fprintf(&out, "%s size=%d flushes=%d records-end=%d\n", name, len(data), len(layout.flushes), layout.end)
	}
	if out.Len() == 0 {
		return "no segments\n"
	}
	return out.String()
}

func (s *readerScript) dump(t *testing.T, d *datadriven.TestData) string {
	name := s.fileArgument(t, d)
	data := s.read(t, name)
	layout := walkSegment(data)
	var out strings.Builder
	fmt.Fprintf(&out, "%s: %d bytes\n", name, len(data))
	for i, record := range layout.records {
		fmt.Fprintf(&out, "#%d @%d+%d %s\n", i, record.offset, record.size, describeRecord(record.decodedRecord))
	}
	rest := data[layout.end:]
	switch {
	case layout.stop != nil && !errors.Is(layout.stop, errZeroHeader):
		fmt.Fprintf(&out, "stops @%d: %v\n", layout.end, layout.stop)
	case allZero(rest):
		fmt.Fprintf(&out, "end @%d, then %d zero bytes\n", layout.end, len(rest))
	default:
		fmt.Fprintf(&out, "end @%d, then %d bytes, nonzero from @%d\n", layout.end, len(rest), layout.end+firstNonZero(rest))
	}
	return out.String()
}

func describeRecord(record decodedRecord) string {
	switch record.kind {
	case recordSegmentHeader:
		header, err := decodeSegmentHeader(record.payload)
		if err != nil {
			return fmt.Sprintf("segment header: %v", err)
		}
		text := fmt.Sprintf("segment header seq=%d", header.sequence)
		for _, checkpoint := range header.checkpoints {
			text += fmt.Sprintf(" [group %d snapshot %d@%d last %d hs %d,%d,%d]", checkpoint.group,
				checkpoint.snapshot.Index, checkpoint.snapshot.Term, checkpoint.lastIndex,
				checkpoint.hardState.Term, checkpoint.hardState.Vote, checkpoint.hardState.Commit)
		}
		return text
	case recordFlush:
		length, err := decodeFlush(record.payload)
		if err != nil {
			return fmt.Sprintf("flush: %v", err)
		}
		return fmt.Sprintf("flush body=%d", length)
	case recordEntry:
		group, entry, err := decodeEntry(record.payload)
		if err != nil {
			return fmt.Sprintf("entry: %v", err)
		}
		return fmt.Sprintf("entry group %d %d@%d data=%dB", group, entry.Index, entry.Term, len(entry.Data))
	case recordHardState:
		group, state, err := decodeHardState(record.payload)
		if err != nil {
			return fmt.Sprintf("hard state: %v", err)
		}
		return fmt.Sprintf("hard state group %d term=%d vote=%d commit=%d", group, state.Term, state.Vote, state.Commit)
	case recordSnapshotMarker:
		group, marker, err := decodeSnapshotMarker(record.payload)
		if err != nil {
			return fmt.Sprintf("snapshot marker: %v", err)
		}
		return fmt.Sprintf("snapshot marker group %d %d@%d installed=%t", group, marker.Index, marker.Term, marker.Installed)
	}
	return fmt.Sprintf("record of type %d", record.kind)
}

// segmentLayout is where the records of a segment are, as far as they decode.
type segmentLayout struct {
	records []positionedRecord
	flushes []int // offsets of flush records
	end     int   // end of the last record that decodes
	stop    error // why decoding stopped before the end of the data
}

// walkSegment decodes records from the start of data until one fails; it
// does not check that flush lengths match their bodies.
func walkSegment(data []byte) segmentLayout {
	var layout segmentLayout
	for layout.end < len(data) {
		record, err := decodeRecord(data, layout.end)
		if err != nil {
			layout.stop = err
			break
		}
		if record.kind == recordFlush {
			layout.flushes = append(layout.flushes, layout.end)
		}
		layout.records = append(layout.records, positionedRecord{decodedRecord: record, offset: layout.end})
		layout.end += record.size
	}
	return layout
}

func (s *readerScript) fileArgument(t *testing.T, d *datadriven.TestData) string {
	var value string
	d.ScanArgs(t, "file", &value)
	sequences := s.sequences(t)
	if value == "last" {
		if len(sequences) == 0 {
			d.Fatalf(t, "file=last: no segments")
		}
		return segmentName(sequences[len(sequences)-1])
	}
	sequence, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		d.Fatalf(t, "file=%s: %v", value, err)
	}
	return segmentName(sequence)
}

func (s *readerScript) read(t *testing.T, name string) []byte {
	data, err := readFile(s.fs, filepath.Join(testDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

var offsetPattern = regexp.MustCompile(`^(?:(\d+)|(end|first-flush|last-flush|last-record|rec\d+|sector\((.+)\)))([+-]\d+)?$`)

// offset evaluates an offset expression against a segment's bytes.
func offset(t *testing.T, d *datadriven.TestData, data []byte, expression string) int {
	match := offsetPattern.FindStringSubmatch(expression)
	if match == nil {
		d.Fatalf(t, "bad offset %q", expression)
	}
	layout := walkSegment(data)
	var base int
	switch anchor := match[2]; {
	case match[1] != "":
		base, _ = strconv.Atoi(match[1])
	case anchor == "end":
		base = layout.end
	case anchor == "first-flush" || anchor == "last-flush":
		if len(layout.flushes) == 0 {
			d.Fatalf(t, "%s: the segment has no flush", anchor)
		}
		base = layout.flushes[0]
		if anchor == "last-flush" {
			base = layout.flushes[len(layout.flushes)-1]
		}
	case anchor == "last-record":
		base = layout.records[len(layout.records)-1].offset
	case strings.HasPrefix(anchor, "rec"):
		number, _ := strconv.Atoi(anchor[len("rec"):])
		if number >= len(layout.records) {
			d.Fatalf(t, "%s: the segment has %d records", anchor, len(layout.records))
		}
		base = layout.records[number].offset
	default: // sector(X)
		base = offset(t, d, data, match[3]) / vfs.SectorSize * vfs.SectorSize
	}
	if match[4] != "" {
		delta, _ := strconv.Atoi(match[4])
		base += delta
	}
	return base
}

// rewrite replaces a segment's contents and fsyncs them.
func (s *readerScript) rewrite(t *testing.T, name string, data []byte) {
	if s.wal != nil {
		t.Fatalf("close the WAL before damaging %s", name)
	}
	s.undo.name, s.undo.data = name, s.read(t, name)
	s.write(t, name, data)
}

func (s *readerScript) write(t *testing.T, name string, data []byte) {
	file, err := s.fs.OpenReadWrite(filepath.Join(testDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := file.Truncate(int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatal(err)
	}
}

func (s *readerScript) corrupt(t *testing.T, d *datadriven.TestData) string {
	name := s.fileArgument(t, d)
	data := s.read(t, name)
	var expression string
	d.ScanArgs(t, "offset", &expression)
	at := offset(t, d, data, expression)
	bits := uint64(1)
	if value, ok := argument(d.CmdArgs, "bits"); ok {
		var err error
		if bits, err = strconv.ParseUint(value, 0, 8); err != nil {
			d.Fatalf(t, "bits=%s: %v", value, err)
		}
	}
	if at < 0 || at >= len(data) {
		d.Fatalf(t, "offset %d outside %s's %d bytes", at, name, len(data))
	}
	was := data[at]
	data[at] ^= byte(bits)
	s.rewrite(t, name, data)
	return fmt.Sprintf("%s[%d]: %#02x -> %#02x\n", name, at, was, data[at])
}

func (s *readerScript) zero(t *testing.T, d *datadriven.TestData) string {
	name := s.fileArgument(t, d)
	data := s.read(t, name)
	var fromExpression, toExpression string
	d.ScanArgs(t, "from", &fromExpression)
	d.ScanArgs(t, "to", &toExpression)
	from, to := offset(t, d, data, fromExpression), offset(t, d, data, toExpression)
	if from < 0 || to > len(data) || from > to {
		d.Fatalf(t, "range [%d, %d) outside %s's %d bytes", from, to, name, len(data))
	}
	clear(data[from:to])
	s.rewrite(t, name, data)
	return fmt.Sprintf("%s: zeroed [%d, %d)\n", name, from, to)
}

func (s *readerScript) truncate(t *testing.T, d *datadriven.TestData) string {
	name := s.fileArgument(t, d)
	data := s.read(t, name)
	var size int
	if value, ok := argument(d.CmdArgs, "size"); ok {
		size = offset(t, d, data, value)
	} else {
		var drop int
		d.ScanArgs(t, "drop-last", &drop)
		size = walkSegment(data).end - drop
	}
	if size < 0 || size > len(data) {
		d.Fatalf(t, "size %d outside %s's %d bytes", size, name, len(data))
	}
	s.rewrite(t, name, data[:size])
	return fmt.Sprintf("%s: %d -> %d bytes\n", name, len(data), size)
}

func (s *readerScript) undoDamage(t *testing.T, d *datadriven.TestData) string {
	if s.undo.name == "" {
		d.Fatalf(t, "undo: nothing to undo")
	}
	s.write(t, s.undo.name, s.undo.data)
	name := s.undo.name
	s.undo.name, s.undo.data = "", nil
	return fmt.Sprintf("%s restored\n", name)
}

func (s *readerScript) remove(t *testing.T, d *datadriven.TestData) string {
	name := s.fileArgument(t, d)
	if err := s.fs.Remove(filepath.Join(testDir, name)); err != nil {
		return fmt.Sprintf("error: %v\n", err)
	}
	if err := s.fs.SyncDir(testDir); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("removed %s\n", name)
}

func (s *readerScript) rename(t *testing.T, d *datadriven.TestData) string {
	name := s.fileArgument(t, d)
	var to uint64
	d.ScanArgs(t, "to", &to)
	if err := s.fs.Rename(filepath.Join(testDir, name), filepath.Join(testDir, segmentName(to))); err != nil {
		return fmt.Sprintf("error: %v\n", err)
	}
	if err := s.fs.SyncDir(testDir); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("renamed %s to %s\n", name, segmentName(to))
}
