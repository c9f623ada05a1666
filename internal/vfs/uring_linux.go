//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x)

package vfs

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The io_uring flush (FlushAuto). A ring here does one thing: it takes an
// IORING_OP_FSYNC for a file, which the kernel always hands to one of its
// io_uring workers, and signals an eventfd when the flush is done; the
// goroutine waits for that eventfd in the Go netpoller, so it is parked
// like a goroutine waiting on a socket, and no thread sits in a blocking
// system call. The result is the fsync's own: 0 or the errno fsync(2)
// would have returned.
//
// Rings are kept in a pool, one per flush in flight (the WAL's save and its
// zero-ahead writer may flush at once), never more than the most flushes
// ever in flight together. If the first ring cannot be set up, FlushAuto
// uses fsync(2) for the life of the process, and so it does once the
// kernel refuses a submission in a way that will not change (EPERM, ENOSYS,
// EINVAL from io_uring_enter; EACCES or EOPNOTSUPP for the fsync). A flush
// the kernel did not take, or took and cancelled without running (a worker
// thread it could not start), falls back to fsync(2): no fsync ran, so no
// result of one is lost. Once an fsync ran, its result is the Sync's; if
// its completion cannot be read (or is not its own), the Sync fails and the
// ring is dropped, never pooled with a flush of unknown outcome in it.

// The kernel's struct io_uring_params is 120 bytes; a layout that differs
// fails to compile here.
var _ [120]byte = [unsafe.Sizeof(uringParams{})]byte{}

// ringSync flushes f through a ring. done is false when no fsync ran
// through it (no ring on this system, the flush not taken): the caller
// then uses fsync(2).
func ringSync(f *os.File) (done bool, err error) {
	r, err := rings.get()
	if err != nil {
		return false, nil
	}
	conn, err := f.SyscallConn()
	if err != nil {
		rings.put(r)
		return false, nil
	}
	var outcome flushOutcome
	var flushErr error
	// Control keeps the descriptor's number from being closed and reused
	// until the kernel holds its own reference to the file (it takes one
	// when it takes the submission): a Close meanwhile is deferred.
	ctlErr := conn.Control(func(fd uintptr) { outcome, flushErr = r.fsync(fd) })
	if ctlErr != nil { // closed file: fsync(2) gives the error
		rings.put(r)
		return false, nil
	}
	switch outcome {
	case notTaken: // its entry still waits at the tail: the ring is spent
		rings.drop(r, false, nil)
		return false, nil
	case notTakenEver, notRunEver:
		rings.drop(r, true, flushErr)
		return false, nil
	case notRun: // its completion was read: the ring is as good as new
		rings.put(r)
		return false, nil
	case lost:
		rings.drop(r, false, nil)
		return true, &os.PathError{Op: "sync", Path: f.Name(), Err: flushErr}
	}
	rings.flushes.Add(1)
	rings.put(r)
	if flushErr != nil {
		return true, &os.PathError{Op: "sync", Path: f.Name(), Err: flushErr}
	}
	return true, nil
}

// flushOutcome is what became of a flush given to a ring.
type flushOutcome int

const (
	flushed      flushOutcome = iota // the fsync ran; its error is the flush's
	notTaken                         // the kernel took no submission this time
	notTakenEver                     // nor will it for this process (EPERM, ENOSYS, EINVAL)
	notRun                           // taken, then cancelled before any fsync ran (ECANCELED)
	notRunEver                       // refused the fsync operation itself (EACCES, EOPNOTSUPP)
	lost                             // taken, and its completion could not be read: outcome unknown
)

// RingFlushes reports whether FlushAuto flushes through an io_uring on
// this system, and if not, why not. It sets up a ring to find out (and
// keeps it for the first flush).
func RingFlushes() (bool, error) {
	r, err := rings.get()
	if err != nil {
		return false, err
	}
	rings.put(r)
	return true, nil
}

// rings is the process's pool of flush rings.
var rings ringPool

// ringPool hands out rings, one per flush in flight.
type ringPool struct {
	mu      sync.Mutex
	free    []*syncRing
	tried   bool  // whether a first ring was set up or refused
	refused error // why every ring is refused: the first could not be set up, or the kernel refuses their flushes for good
	made    int   // rings set up and not dropped (tests)

	flushes atomic.Uint64 // fsyncs run through a ring (tests)
	writes  atomic.Uint64 // writes run through a ring with their fsync (tests)
}

func (p *ringPool) get() (*syncRing, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refused != nil {
		return nil, p.refused
	}
	if n := len(p.free); n > 0 {
		r := p.free[n-1]
		p.free = p.free[:n-1]
		return r, nil
	}
	r, err := newSyncRing()
	if err != nil {
		if !p.tried {
			p.refused = err // this kernel does not let the process use io_uring
		}
		p.tried = true
		return nil, err
	}
	p.tried = true
	p.made++
	return r, nil
}

func (p *ringPool) put(r *syncRing) {
	p.mu.Lock()
	p.free = append(p.free, r)
	p.mu.Unlock()
}

// drop closes r instead of pooling it; ever says the kernel will refuse
// every ring's flushes from now on, for reason.
func (p *ringPool) drop(r *syncRing, ever bool, reason error) {
	r.close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.made--
	if ever && p.refused == nil {
		p.refused = reason
		for _, free := range p.free {
			free.close()
			p.made--
		}
		p.free = nil
	}
}

// syncRing is one io_uring, used by one flush at a time. It has ringEntries
// entries though it takes one flush: since Linux 5.12 the kernel's workers
// are shared by the rings one thread submits to, and their number for
// blocking work such as fsync is capped at the ring's entries, so a ring of
// one would queue an fsync submitted from the same thread behind another
// ring's.
const ringEntries = 8

type syncRing struct {
	fd     int             // the ring's descriptor
	event  *os.File        // eventfd the kernel signals on each completion, watched by the netpoller
	events syscall.RawConn // event's, to wait for a signal without reading the counter
	// postedFunc is posted, bound once: a flush's wait allocates nothing.
	postedFunc func(uintptr) bool
	writing    []byte // the buffer of the write under way (uring_write_linux.go)
	rings      []byte // the submission and completion queues (one mapping)
	sqes       []byte // the submission queue entries
	params     uringParams

	sqTail, sqMask, sqArray *uint32
	cqHead, cqTail, cqMask  *uint32
	cqes                    unsafe.Pointer
}

// uringParams is the kernel's struct io_uring_params.
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// The kernel's io_uring interface (include/uapi/linux/io_uring.h).
const (
	sysIOURingSetup    = 425 // the same number on the architectures this file builds for
	sysIOURingEnter    = 426
	sysIOURingRegister = 427

	uringOffSQRing       = 0
	uringOffSQEs         = 0x10000000
	uringFeatSingleMmap  = 1 << 0
	uringRegisterEventFD = 4
	uringOpFsync         = 3

	uringSQESize         = 64 // struct io_uring_sqe
	uringSQEFDOffset     = 4  // __s32 fd
	uringSQEUserData     = 32 // __u64 user_data
	uringCQESize         = 16 // struct io_uring_cqe
	uringCQEResultOffset = 8  // __s32 res
)

// newSyncRing sets up a ring, or returns why the kernel refuses one (no
// io_uring, a seccomp profile, the io_uring_disabled sysctl, a kernel
// older than single-mapping rings).
func newSyncRing() (*syncRing, error) {
	r := &syncRing{fd: -1}
	fd, _, errno := syscall.Syscall(sysIOURingSetup, ringEntries, uintptr(unsafe.Pointer(&r.params)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("vfs: io_uring_setup: %w", errno)
	}
	r.fd = int(fd)
	if err := r.mapQueues(); err != nil {
		r.close()
		return nil, err
	}
	efd, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		r.close()
		return nil, fmt.Errorf("vfs: eventfd for io_uring: %w", errno)
	}
	r.event = os.NewFile(efd, "io_uring eventfd") // non-blocking: watched by the netpoller
	if err := r.event.SetReadDeadline(time.Time{}); err != nil {
		// The netpoller could not take the descriptor (epoll's watch
		// limit): every wait would fail at once.
		r.close()
		return nil, fmt.Errorf("vfs: io_uring eventfd not in the netpoller: %w", err)
	}
	events, err := r.event.SyscallConn()
	if err != nil {
		r.close()
		return nil, fmt.Errorf("vfs: io_uring eventfd: %w", err)
	}
	r.events, r.postedFunc = events, r.posted
	event := int32(efd)
	if _, _, errno := syscall.Syscall6(sysIOURingRegister, uintptr(r.fd), uringRegisterEventFD, uintptr(unsafe.Pointer(&event)), 1, 0, 0); errno != 0 {
		r.close()
		return nil, fmt.Errorf("vfs: io_uring_register eventfd: %w", errno)
	}
	return r, nil
}

func (r *syncRing) mapQueues() error {
	p := &r.params
	if p.features&uringFeatSingleMmap == 0 {
		return errors.New("vfs: io_uring without single-mapping queues (Linux before 5.4)")
	}
	size := max(p.sqOff.array+p.sqEntries*4, p.cqOff.cqes+p.cqEntries*uringCQESize)
	queues, err := syscall.Mmap(r.fd, uringOffSQRing, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("vfs: io_uring mmap of the queues: %w", err)
	}
	r.rings = queues
	sqes, err := syscall.Mmap(r.fd, uringOffSQEs, int(p.sqEntries*uringSQESize), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("vfs: io_uring mmap of the entries: %w", err)
	}
	r.sqes = sqes
	at := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&queues[off])) }
	r.sqTail, r.sqMask, r.sqArray = at(p.sqOff.tail), at(p.sqOff.ringMask), at(p.sqOff.array)
	r.cqHead, r.cqTail, r.cqMask = at(p.cqOff.head), at(p.cqOff.tail), at(p.cqOff.ringMask)
	r.cqes = unsafe.Pointer(&queues[p.cqOff.cqes])
	return nil
}

// fsync flushes fd and waits for the flush in the netpoller, and says what
// became of it (flushOutcome); err is the flush's error, or why it did not
// run or was lost.
func (r *syncRing) fsync(fd uintptr) (flushOutcome, error) {
	tail := atomic.LoadUint32(r.sqTail)
	r.prepare(tail, uringOpFsync, fd)    // fsync_flags 0, off 0, len 0: all of the file, as fsync(2)
	atomic.StoreUint32(r.sqTail, tail+1) // the entry's bytes before the tail that publishes it
	if _, ever, err := r.submit(1); err != nil {
		if ever {
			return notTakenEver, err
		}
		return notTaken, err
	}
	if err := r.awaitCompletion(); err != nil {
		return lost, fmt.Errorf("waiting for io_uring: %w", err)
	}
	userData, res := r.takeCompletion()
	if userData != uint64(tail) {
		return lost, fmt.Errorf("io_uring completion of flush %d where flush %d was waited for", userData, tail)
	}
	return fsyncOutcome(res)
}

// fsyncOutcome maps an fsync's completion result to what became of it.
func fsyncOutcome(res int32) (flushOutcome, error) {
	if res >= 0 {
		return flushed, nil
	}
	switch errno := syscall.Errno(-res); errno {
	case syscall.ECANCELED: // no worker could run it: nothing was flushed
		return notRun, errno
	case syscall.EACCES, syscall.EOPNOTSUPP: // the operation refused before it ran
		return notRunEver, errno
	default: // the fsync's own error, EIO among them
		return flushed, errno
	}
}

// prepare fills the submission entry at index i (not yet published by the
// tail) with operation op on fd, with i as its user data, and returns it
// for the operation's other fields.
func (r *syncRing) prepare(i uint32, op byte, fd uintptr) []byte {
	slot := i & *r.sqMask
	sqe := r.sqes[slot*uringSQESize : (slot+1)*uringSQESize]
	clear(sqe)
	sqe[0] = op
	*(*int32)(unsafe.Pointer(&sqe[uringSQEFDOffset])) = int32(fd)
	*(*uint64)(unsafe.Pointer(&sqe[uringSQEUserData])) = uint64(i)
	*(*uint32)(unsafe.Add(unsafe.Pointer(r.sqArray), 4*uintptr(slot))) = slot
	return sqe
}

// takeCompletion reads the completion at the head (awaitCompletion said
// it is there) and hands its slot back to the kernel.
func (r *syncRing) takeCompletion() (userData uint64, res int32) {
	head := atomic.LoadUint32(r.cqHead)
	cqe := unsafe.Add(r.cqes, uintptr(head&*r.cqMask)*uringCQESize)
	userData = *(*uint64)(cqe)
	res = *(*int32)(unsafe.Add(cqe, uringCQEResultOffset))
	atomic.StoreUint32(r.cqHead, head+1) // the entry read before it is handed back
	return userData, res
}

// awaitCompletion waits until the completion queue holds an entry, without
// a system call when it does: it looks at the queue, and while that is
// empty it parks in the netpoller until the kernel signals the eventfd (it
// posts the entry before it signals). RawConn.Read keeps a signal that
// came after it began, and the netpoller's edge-triggered watch reports
// every signal, so the eventfd's counter is never read: it only grows, by
// one a completion, far from its 2^64 bound.
func (r *syncRing) awaitCompletion() error {
	if r.posted(0) {
		return nil
	}
	return r.events.Read(r.postedFunc)
}

// posted reports whether the completion queue holds an entry; its
// argument (the eventfd, for RawConn.Read) is not used.
func (r *syncRing) posted(uintptr) bool {
	return atomic.LoadUint32(r.cqHead) != atomic.LoadUint32(r.cqTail)
}

// submit hands the n entries at the tail to the kernel, which passes an
// fsync to one of its workers at once: this returns without waiting for
// the disk. It returns how many entries the kernel took; err is set when
// it took none (the flush is then not under way), or fewer than n, with
// whether the kernel will refuse every submission of this process (ever).
func (r *syncRing) submit(n uint) (taken uint, ever bool, err error) {
	for {
		// RawSyscall: the call does not wait for the disk, and telling the
		// runtime of a system call would wake its monitor thread from its
		// deep sleep each time a member turns from idle to a write, the
		// polling this ring is here to avoid. (A thread's first submission
		// also starts its kernel worker: that one call takes longer.)
		got, _, errno := syscall.RawSyscall6(sysIOURingEnter, uintptr(r.fd), uintptr(n), 0, 0, 0, 0)
		switch {
		case errno == syscall.EINTR:
			continue
		case errno == syscall.EPERM || errno == syscall.ENOSYS || errno == syscall.EINVAL:
			return 0, true, fmt.Errorf("vfs: io_uring_enter: %w", errno)
		case errno != 0:
			return 0, false, fmt.Errorf("vfs: io_uring_enter: %w", errno)
		case got == 0:
			return 0, false, errors.New("vfs: io_uring_enter submitted nothing")
		case uint(got) < n:
			return uint(got), false, fmt.Errorf("vfs: io_uring_enter submitted %d of %d entries", got, n)
		}
		return n, false, nil
	}
}

// close releases the ring; a flush still in the kernel completes there.
func (r *syncRing) close() {
	if r.event != nil {
		r.event.Close()
	}
	if r.sqes != nil {
		syscall.Munmap(r.sqes)
	}
	if r.rings != nil {
		syscall.Munmap(r.rings)
	}
	if r.fd >= 0 {
		syscall.Close(r.fd)
	}
}
