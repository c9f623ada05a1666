package fencing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// fileMagic opens every fencing log; the last byte is the format version.
const fileMagic = "LATCHFG1"

// recordHeaderSize is the fixed header of a record: payload length, CRC of
// the length bytes, CRC of the payload.
const recordHeaderSize = 12

// MaxResourceLen is the longest resource name a File guard accepts.
const MaxResourceLen = 4096

// ErrClosed is returned by a File guard's methods after Close.
var ErrClosed = errors.New("fencing: guard closed")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// File is a durable Guard backed by an append-only log file. Every Accept
// that raises a resource's highest token appends a record and fsyncs it
// before returning nil; NewFile replays the log.
type File struct {
	path string

	// mu guards every field below. It is held across an append and its
	// fsync, so Accepts of a File are serialized.
	mu      sync.Mutex
	file    *os.File // nil after Close
	size    int64    // bytes of valid log; the next record goes here
	records int      // records in the log
	highest map[string]uint64
	// broken is set when a write or fsync failed: the file's state is then
	// unknown and the guard refuses everything (an fsync is never retried).
	broken error
}

// NewFile opens (creating if needed) the fencing log at path and replays it.
// A record cut short or zeroed at the very end of the file, left by a crash
// during an append, is dropped; any other damage is an error naming the file
// and offset.
func NewFile(path string) (*File, error) {
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("fencing: open %s: %w", path, err)
	}
	g := &File{path: path, file: file, highest: map[string]uint64{}}
	if err := g.load(); err != nil {
		_ = file.Close()
		return nil, err
	}
	if g.records > compactThreshold(len(g.highest)) {
		if err := g.compactLocked(); err != nil {
			_ = g.file.Close()
			return nil, err
		}
	}
	return g, nil
}

// load reads the log into highest, repairs a torn tail and leaves size at
// the end of the valid records.
func (g *File) load() error {
	data, err := io.ReadAll(g.file)
	if err != nil {
		return fmt.Errorf("fencing: read %s: %w", g.path, err)
	}
	if len(data) < len(fileMagic) && bytes.HasPrefix([]byte(fileMagic), data) {
		return g.initialize() // new file, or a crash while creating it
	}
	if !bytes.HasPrefix(data, []byte(fileMagic)) {
		return fmt.Errorf("fencing: %s: offset 0: not a fencing log (bad magic)", g.path)
	}
	offset := len(fileMagic)
	for offset < len(data) {
		resource, token, next, err := decodeRecord(data, offset)
		if errors.Is(err, errTornTail) {
			return g.truncate(int64(offset))
		}
		if err != nil {
			return fmt.Errorf("fencing: %s: offset %d: %w", g.path, offset, err)
		}
		g.highest[resource] = max(g.highest[resource], token)
		g.records++
		offset = next
	}
	g.size = int64(offset)
	return nil
}

// errTornTail marks the remains of an interrupted final append.
var errTornTail = errors.New("torn tail")

// decodeRecord decodes the record at offset of data and returns the offset
// after it. The remains of an interrupted last append give errTornTail.
func decodeRecord(data []byte, offset int) (resource string, token uint64, next int, err error) {
	rest := data[offset:]
	if allZero(rest) || len(rest) < recordHeaderSize {
		return "", 0, 0, errTornTail
	}
	length := binary.LittleEndian.Uint32(rest[0:4])
	if crc32.Checksum(rest[0:4], castagnoli) != binary.LittleEndian.Uint32(rest[4:8]) {
		return "", 0, 0, errors.New("corrupt record header (length checksum mismatch)")
	}
	if length < 8 || length > 8+MaxResourceLen {
		return "", 0, 0, fmt.Errorf("corrupt record header (payload length %d)", length)
	}
	end := recordHeaderSize + int(length)
	if len(rest) < end {
		return "", 0, 0, errTornTail
	}
	payload := rest[recordHeaderSize:end]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(rest[8:12]) {
		if allZero(rest[end:]) {
			return "", 0, 0, errTornTail // the last record, partly written
		}
		return "", 0, 0, errors.New("corrupt record (payload checksum mismatch)")
	}
	return string(payload[8:]), binary.LittleEndian.Uint64(payload[:8]), offset + end, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// encodeRecord returns the log record of (resource, token).
func encodeRecord(resource string, token uint64) []byte {
	record := make([]byte, recordHeaderSize+8+len(resource))
	payload := record[recordHeaderSize:]
	binary.LittleEndian.PutUint64(payload, token)
	copy(payload[8:], resource)
	binary.LittleEndian.PutUint32(record[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(record[4:8], crc32.Checksum(record[0:4], castagnoli))
	binary.LittleEndian.PutUint32(record[8:12], crc32.Checksum(payload, castagnoli))
	return record
}

// initialize writes the magic to an empty (or partly created) log and makes
// it durable, directory entry included.
func (g *File) initialize() error {
	if err := g.file.Truncate(0); err != nil {
		return fmt.Errorf("fencing: truncate %s: %w", g.path, err)
	}
	if _, err := g.file.WriteAt([]byte(fileMagic), 0); err != nil {
		return fmt.Errorf("fencing: write %s: %w", g.path, err)
	}
	if err := g.file.Sync(); err != nil {
		return fmt.Errorf("fencing: fsync %s: %w", g.path, err)
	}
	g.size = int64(len(fileMagic))
	return syncDir(filepath.Dir(g.path))
}

// truncate drops a torn tail at offset and makes that durable.
func (g *File) truncate(offset int64) error {
	if err := g.file.Truncate(offset); err != nil {
		return fmt.Errorf("fencing: %s: truncate torn tail at offset %d: %w", g.path, offset, err)
	}
	if err := g.file.Sync(); err != nil {
		return fmt.Errorf("fencing: fsync %s: %w", g.path, err)
	}
	g.size = offset
	return nil
}

// Check implements Guard.
func (g *File) Check(resource string, token uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.usableLocked(); err != nil {
		return err
	}
	return checkAgainst(resource, token, g.highest)
}

// Accept implements Guard: a token that raises resource's highest is
// appended and fsynced before Accept returns nil.
func (g *File) Accept(resource string, token uint64) error {
	if len(resource) > MaxResourceLen {
		return fmt.Errorf("fencing: resource name of %d bytes is over the limit of %d", len(resource), MaxResourceLen)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.usableLocked(); err != nil {
		return err
	}
	if err := checkAgainst(resource, token, g.highest); err != nil {
		return err
	}
	if seen, ok := g.highest[resource]; ok && seen == token {
		return nil // already durable
	}
	if err := g.appendLocked(encodeRecord(resource, token)); err != nil {
		return err
	}
	g.highest[resource] = token
	if g.records > compactThreshold(len(g.highest)) {
		return g.compactLocked()
	}
	return nil
}

// appendLocked writes record at the end of the log and fsyncs it. A failure
// breaks the guard for good.
func (g *File) appendLocked(record []byte) error {
	if _, err := g.file.WriteAt(record, g.size); err != nil {
		g.broken = fmt.Errorf("fencing: append to %s at offset %d: %w", g.path, g.size, err)
		return g.broken
	}
	if err := g.file.Sync(); err != nil {
		g.broken = fmt.Errorf("fencing: fsync %s: %w", g.path, err)
		return g.broken
	}
	g.size += int64(len(record))
	g.records++
	return nil
}

func (g *File) usableLocked() error {
	if g.file == nil {
		return ErrClosed
	}
	return g.broken
}

// Highest returns the highest token accepted for resource, and whether any was.
func (g *File) Highest(resource string) (uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	token, ok := g.highest[resource]
	return token, ok
}

// Close closes the log. Everything accepted is already durable.
func (g *File) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.file == nil {
		return nil
	}
	err := g.file.Close()
	g.file = nil
	return err
}

// compactThreshold is the record count above which a log holding resources
// distinct resources is rewritten.
func compactThreshold(resources int) int { return 1024 + 2*resources }

// compactLocked rewrites the log with one record per resource: temp file,
// fsync, rename over the log, fsync of the directory.
func (g *File) compactLocked() error {
	resources := make([]string, 0, len(g.highest))
	for resource := range g.highest {
		resources = append(resources, resource)
	}
	sort.Strings(resources)
	var buf bytes.Buffer
	buf.WriteString(fileMagic)
	for _, resource := range resources {
		buf.Write(encodeRecord(resource, g.highest[resource]))
	}
	temp := g.path + ".compact"
	if err := writeSynced(temp, buf.Bytes()); err != nil {
		_ = os.Remove(temp)
		return nil // the old log is intact and still in use; try again later
	}
	if err := os.Rename(temp, g.path); err != nil {
		_ = os.Remove(temp)
		return nil
	}
	if err := syncDir(filepath.Dir(g.path)); err != nil {
		g.broken = err
		return err
	}
	file, err := os.OpenFile(g.path, os.O_RDWR, 0)
	if err != nil {
		g.broken = fmt.Errorf("fencing: reopen %s after compaction: %w", g.path, err)
		return g.broken
	}
	_ = g.file.Close()
	g.file, g.size, g.records = file, int64(buf.Len()), len(resources)
	return nil
}

// writeSynced writes data to a new file at path and fsyncs it.
func writeSynced(path string, data []byte) error {
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := file.Write(data); err != nil {
		_ = file.Close()
		return err
	}
	if err := file.Sync(); err != nil {
		_ = file.Close()
		return err
	}
	return file.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fencing: open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fencing: fsync directory %s: %w", dir, err)
	}
	return nil
}
