package vfs

// FlushMethod says how the operating system FS's files make their contents
// durable on Sync. Both wait for the same fsync of the same file and report
// its error; they differ in what waits.
type FlushMethod int

const (
	// FlushAuto flushes through an io_uring where the kernel allows it
	// (Linux 5.4 or later, not refused by a seccomp profile or the
	// kernel.io_uring_disabled sysctl), else with the fsync system call.
	// Through the ring the fsync runs on a kernel worker while the
	// waiting goroutine is parked in the Go netpoller, so no thread the Go
	// runtime manages blocks in the flush: a thread blocked in fsync on
	// every WAL save keeps the runtime's monitor thread polling every
	// 20 µs and handing the blocked thread's processor to another thread.
	FlushAuto FlushMethod = iota
	// FlushSyscall always uses the fsync system call.
	FlushSyscall
)

// String names the method as latchd's --wal-flush flag does.
func (m FlushMethod) String() string {
	if m == FlushSyscall {
		return "fsync"
	}
	return "auto"
}

// ParseFlushMethod reads a --wal-flush value: "auto" or "fsync".
func ParseFlushMethod(s string) (FlushMethod, bool) {
	switch s {
	case "auto":
		return FlushAuto, true
	case "fsync":
		return FlushSyscall, true
	}
	return FlushAuto, false
}
