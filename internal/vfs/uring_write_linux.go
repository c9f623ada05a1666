//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x)

package vfs

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// A write and its flush in one submission (osFile.WriteAtSync). The write
// and an fsync linked to it go to the kernel in one io_uring_enter, made
// as a raw system call: the kernel does the write during the submission
// where it can without blocking, or hands it to a worker, and never puts
// the thread to sleep, where pwrite(2) through the runtime's system
// call bookkeeping let its monitor thread take the processor from a member
// in the middle of each WAL write (with one processor a member: a thread
// woken to run it, and the writer's thread parked when the write returned).
//
// A write the kernel does during the submission holds the member's one
// processor while it copies (as a raw pwrite would): a WAL flush is one
// batch of raft's messages, up to a MiB or so, a copy of tens of
// microseconds at most.
//
// The kernel starts the linked fsync only once the write completed whole;
// a write that fell short or failed cancels it. What the pair leaves
// undone (a short write's rest, a write the kernel would not run, an
// operation an older kernel does not know) the caller finishes with
// pwrite(2) and Sync, so the outcome is always a write and a flush of all
// of p, or an error.

const (
	uringOpWrite = 23     // IORING_OP_WRITE (Linux 5.6)
	uringSQELink = 1 << 2 // IOSQE_IO_LINK: the next entry starts once this one completed whole

	uringSQESkipSuccess = 1 << 6  // IOSQE_CQE_SKIP_SUCCESS: no completion if it succeeds, nor for the links it cancels
	uringFeatCQESkip    = 1 << 11 // IORING_FEAT_CQE_SKIP (Linux 5.17)

	uringSQEFlagsOffset  = 1  // __u8 flags
	uringSQEOffOffset    = 8  // __u64 off
	uringSQEAddrOffset   = 16 // __u64 addr
	uringSQELengthOffset = 24 // __u32 len
)

// maxRingWrite is the largest write given to a ring: the kernel writes at
// most MAX_RW_COUNT (2 GiB less a page) in one operation, and a write it
// so capped would complete "whole" and let its fsync run; pwrite(2)
// returns the short count instead, and WriteAt writes the rest.
const maxRingWrite = 1 << 30

// ringWritesRefused is set once the kernel is found to lack what the pair
// needs (completions skipped on success, Linux 5.17) or refused the write
// operation itself (EINVAL or EOPNOTSUPP): WriteAtSync then writes with
// pwrite(2) and flushes through the ring for the life of the process.
var ringWritesRefused atomic.Bool

// lostWrites keeps the buffers of writes whose completion was lost: the
// kernel may still read them, so they are never freed.
var lostWrites struct {
	sync.Mutex
	buffers [][]byte
}

// pairOutcome is what became of a write and its linked fsync given to a
// ring.
type pairOutcome struct {
	written  int          // bytes of p the write wrote
	writeErr error        // the write's own error: the pair failed
	flush    flushOutcome // the fsync's; notRun when the write fell short, failed or did not run
	flushErr error        // the fsync's error, or why it did not run or was lost
}

// ringWriteSync writes p at off to f and flushes f through a ring. done
// says nothing is left to do, and err is the outcome (it names f and says
// which of the two failed, or that the outcome is unknown); otherwise err
// is nil, and the caller writes p[written:] with pwrite(2) and flushes f.
func ringWriteSync(f *os.File, p []byte, off int64) (written int, done bool, err error) {
	if len(p) == 0 || len(p) > maxRingWrite || ringWritesRefused.Load() {
		return 0, false, nil
	}
	r, err := rings.get()
	if err != nil {
		return 0, false, nil
	}
	if r.params.features&uringFeatCQESkip == 0 { // Linux before 5.17
		rings.put(r)
		ringWritesRefused.Store(true)
		return 0, false, nil
	}
	conn, err := f.SyscallConn()
	if err != nil {
		rings.put(r)
		return 0, false, nil
	}
	var o pairOutcome
	var spent bool
	// Control: as in ringSync, the descriptor stays open until the kernel
	// holds the file.
	ctlErr := conn.Control(func(fd uintptr) { o, spent = r.writeSync(fd, p, off) })
	if ctlErr != nil { // closed file: pwrite(2) gives the error
		rings.put(r)
		return 0, false, nil
	}
	switch {
	case o.flush == lost:
		lostWrites.Lock()
		lostWrites.buffers = append(lostWrites.buffers, p)
		lostWrites.Unlock()
		rings.drop(r, false, nil)
		return o.written, true, &os.PathError{Op: "write and sync", Path: f.Name(), Err: o.flushErr}
	case o.flush == notTakenEver || o.flush == notRunEver:
		rings.drop(r, true, o.flushErr)
	case spent:
		rings.drop(r, false, nil)
	default:
		rings.put(r)
	}
	switch {
	case o.writeErr != nil:
		return o.written, true, &os.PathError{Op: "write", Path: f.Name(), Err: o.writeErr}
	case o.flush != flushed:
		return o.written, false, nil
	}
	rings.writes.Add(1)
	rings.flushes.Add(1)
	if o.flushErr != nil {
		return o.written, true, &os.PathError{Op: "sync", Path: f.Name(), Err: o.flushErr}
	}
	return o.written, true, nil
}

// writeSync submits a write of p at off to fd and an fsync of fd linked to
// it, and waits in the netpoller for the one completion the pair posts:
// the write's completion is skipped when it wrote all of p, and the
// cancelled fsync's when it did not (IOSQE_CQE_SKIP_SUCCESS on the write),
// so the completion is the fsync's or the write's, never both, and one
// eventfd signal wakes the wait. spent says the ring must not be pooled.
func (r *syncRing) writeSync(fd uintptr, p []byte, off int64) (o pairOutcome, spent bool) {
	tail := atomic.LoadUint32(r.sqTail)
	w := r.prepare(tail, uringOpWrite, fd)
	w[uringSQEFlagsOffset] = uringSQELink | uringSQESkipSuccess
	*(*uint64)(unsafe.Pointer(&w[uringSQEOffOffset])) = uint64(off)
	*(*uint64)(unsafe.Pointer(&w[uringSQEAddrOffset])) = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p))))
	*(*uint32)(unsafe.Pointer(&w[uringSQELengthOffset])) = uint32(len(p))
	r.prepare(tail+1, uringOpFsync, fd)
	// The ring holds p until the pair's completion is read: p escapes to
	// the heap (a goroutine's stack may move while it waits), and stays
	// alive.
	r.writing = p
	defer func() { r.writing = nil }()
	atomic.StoreUint32(r.sqTail, tail+2) // the entries' bytes before the tail that publishes them
	switch taken, ever, err := r.submit(2); {
	case taken == 0 && ever:
		return pairOutcome{flush: notTakenEver, flushErr: err}, false
	case taken == 0: // the entries still wait at the tail: the ring is spent
		return pairOutcome{flush: notTaken, flushErr: err}, true
	case err != nil:
		// The write went alone, its fsync's entry left at the tail, and a
		// write that succeeds posts no completion: its end cannot be
		// known. (The kernel takes fewer entries than asked only when it
		// cannot allocate a request.)
		return pairOutcome{flush: lost, flushErr: err}, true
	}
	if err := r.awaitCompletion(); err != nil {
		return pairOutcome{flush: lost, flushErr: fmt.Errorf("waiting for io_uring: %w", err)}, true
	}
	switch userData, res := r.takeCompletion(); userData {
	case uint64(tail + 1): // the write wrote all of p
		o.flush, o.flushErr = fsyncOutcome(res)
		if o.flush == flushed {
			o.written = len(p)
		} // else the fsync did not run: the caller writes all of p again, to be sure, and flushes
		return o, false
	case uint64(tail): // it fell short or failed, and cancelled the fsync
		return writeOutcome(res, len(p)), false
	default:
		return pairOutcome{flush: lost, flushErr: fmt.Errorf("io_uring completion of entry %d where entry %d or %d was waited for", userData, tail, tail+1)}, true
	}
}

// writeOutcome maps a write's completion result, for a write of n bytes,
// to the pair's outcome before its fsync's is known.
func writeOutcome(res int32, n int) pairOutcome {
	if res >= 0 {
		return pairOutcome{written: min(int(res), n), flush: notRun}
	}
	switch errno := syscall.Errno(-res); errno {
	case syscall.ECANCELED, syscall.EAGAIN, syscall.EINTR: // it did not run: nothing was written
		return pairOutcome{flush: notRun}
	case syscall.EINVAL, syscall.EOPNOTSUPP: // an older kernel without the operation
		ringWritesRefused.Store(true)
		return pairOutcome{flush: notRun}
	default: // the write's own error, EIO or ENOSPC among them
		return pairOutcome{writeErr: errno, flush: notRun}
	}
}
