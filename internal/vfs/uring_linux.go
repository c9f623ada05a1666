//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x)

package vfs

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The io_uring flush (FlushAuto). A ring here does one thing: it takes an
// IORING_OP_FSYNC for a file, which the kernel always hands to one of its
// io_uring workers, and signals an eventfd when the flush is done; the
// goroutine reads that eventfd through the Go netpoller, so it is parked
// like a goroutine waiting on a socket, and no thread sits in a blocking
// system call. The result is the fsync's own: 0 or the errno fsync(2)
// would have returned.
//
// Rings are kept in a pool, one per flush in flight (the WAL's save and its
// zero-ahead writer may flush at once), never more than the most flushes
// ever in flight together. If the first ring cannot be set up, FlushAuto
// uses fsync(2) for the life of the process. A flush whose submission the
// kernel refuses after setup falls back to fsync(2) too (the flush was
// never submitted, so nothing of its result is lost) and that ring is
// closed; once a flush is submitted, its result is the Sync's, whatever it
// is.

// The kernel's struct io_uring_params is 120 bytes; a layout that differs
// fails to compile here.
var _ [120]byte = [unsafe.Sizeof(uringParams{})]byte{}

// ringSync flushes f through a ring. done is false when it did not (no ring
// on this system, or the submission was refused): the caller then uses
// fsync(2).
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
	var submitted bool
	var flushErr error
	// Control holds a reference to the descriptor for the whole flush, as
	// os.File.Sync does, so that a Close meanwhile waits for it.
	ctlErr := conn.Control(func(fd uintptr) { submitted, flushErr = r.fsync(fd) })
	if ctlErr != nil { // closed file: the error fsync(2) would give
		rings.put(r)
		return false, nil
	}
	if !submitted {
		r.close()
		return false, nil
	}
	rings.flushes.Add(1)
	rings.put(r)
	if flushErr != nil {
		return true, &os.PathError{Op: "sync", Path: f.Name(), Err: flushErr}
	}
	return true, nil
}

// ringAvailable reports whether ringSync flushes, setting up the first
// ring if none was.
func ringAvailable() (bool, error) {
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
	refused error // why the first ring could not be set up; then always refused
	made    int   // rings set up so far (tests)

	flushes atomic.Uint64 // flushes submitted through a ring (tests)
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

// syncRing is one io_uring of one entry, used by one flush at a time.
type syncRing struct {
	fd     int      // the ring's descriptor
	event  *os.File // eventfd the kernel signals on each completion, read through the netpoller
	rings  []byte   // the submission and completion queues (one mapping)
	sqes   []byte   // the submission queue entries
	params uringParams

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
	fd, _, errno := syscall.Syscall(sysIOURingSetup, 1, uintptr(unsafe.Pointer(&r.params)), 0)
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
	r.event = os.NewFile(efd, "io_uring eventfd") // non-blocking: read through the netpoller
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

// fsync flushes fd and waits for the flush in the netpoller. submitted is
// false if the kernel did not take the flush (then err says why and
// nothing was flushed by the ring); otherwise err is the flush's result.
func (r *syncRing) fsync(fd uintptr) (submitted bool, err error) {
	tail := atomic.LoadUint32(r.sqTail)
	slot := tail & *r.sqMask
	sqe := r.sqes[slot*uringSQESize : (slot+1)*uringSQESize]
	clear(sqe)
	sqe[0] = uringOpFsync // fsync_flags 0: a full fsync, as fsync(2)
	*(*int32)(unsafe.Pointer(&sqe[uringSQEFDOffset])) = int32(fd)
	*(*uint64)(unsafe.Pointer(&sqe[uringSQEUserData])) = uint64(tail)
	*(*uint32)(unsafe.Add(unsafe.Pointer(r.sqArray), 4*uintptr(slot))) = slot
	atomic.StoreUint32(r.sqTail, tail+1) // the entry's bytes before the tail that publishes it
	for {
		// Submit only: the kernel hands an fsync to a worker at once, so
		// this returns without waiting for the disk.
		n, _, errno := syscall.RawSyscall6(sysIOURingEnter, uintptr(r.fd), 1, 0, 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return false, fmt.Errorf("io_uring_enter: %w", errno)
		}
		if n != 1 {
			return false, errors.New("io_uring_enter submitted nothing")
		}
		break
	}
	var counter [8]byte
	for {
		head := atomic.LoadUint32(r.cqHead)
		if head != atomic.LoadUint32(r.cqTail) {
			cqe := unsafe.Add(r.cqes, uintptr(head&*r.cqMask)*uringCQESize)
			res := *(*int32)(unsafe.Add(cqe, uringCQEResultOffset))
			atomic.StoreUint32(r.cqHead, head+1) // the entry read before it is handed back
			if res < 0 {
				return true, syscall.Errno(-res)
			}
			return true, nil
		}
		if _, err := r.event.Read(counter[:]); err != nil {
			return true, fmt.Errorf("waiting for io_uring: %w", err)
		}
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
