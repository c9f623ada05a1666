package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/fencing"
	"github.com/latch-io/latch/internal/check"
)

// lockProcs is workload F over real client processes. This process serves
// a resource behind fencing.Middleware (its guard a loggingGuard, as the
// lock workload's), and lockProcClients processes, the test binary
// re-executed as lock clients (lockclient.go), take turns on one lock and
// write to the resource with their fencing token. The pause-lock-holder
// fault SIGSTOPs the client that wrote last until its session expired and
// another client wrote with a higher token, then SIGCONTs it: its next
// write, with its old token, must be refused.
type lockProcs struct {
	unchecked bool // planted bug (c): a guard that accepts every token

	guard  *check.LoggingGuard
	server *http.Server
	url    string // the resource, as the clients write to it
	// clients are the processes, set by start before the nemesis runs and
	// not changed after.
	clients []*lockClientProcess

	mu      sync.Mutex    // guards writes, pauses and changed
	writes  []procWrite   // every write the resource answered, in the order answered
	pauses  []holderPause // pause-lock-holder faults, as healed
	changed chan struct{} // closed and replaced on every write
}

const (
	lockProcClients  = 3
	lockProcName     = "chaos-proc" // not the lock workload's lockName
	lockProcResource = "chaos-proc-resource"
	// lockProcGrace is how long a client may take to exit once its stdin
	// closed before it is killed.
	lockProcGrace = 10 * time.Second
)

// procWrite is one write as the resource answered it.
type procWrite struct {
	pid     int // of the client process that sent it
	token   uint64
	status  int       // 200: accepted; 409: refused as stale
	arrived time.Time // when the request reached the resource
	skewed  bool      // of a tenure during which the client's clock ran skewed
}

func (w procWrite) accepted() bool { return w.status == http.StatusOK }

// holderPause is one pause-lock-holder fault.
type holderPause struct {
	pid   int    // the stopped client
	token uint64 // of its accepted write the pause followed
	// moved: while it was stopped, the guard accepted a higher token from
	// another client (its session expired and the lock moved on).
	moved   bool
	highest uint64    // the guard's highest token when it was resumed
	resumed time.Time // just before SIGCONT: any write of pid that arrives later was made after
}

// lockClientProcess is one running lock client.
type lockClientProcess struct {
	cmd    *exec.Cmd
	pid    int
	stdin  io.WriteCloser // takes commands (rateCommand); closing it tells the client to exit
	output *tailBuffer
	exited chan struct{} // closed once the process was reaped
	err    error         // how it exited; set before exited closes

	// Set by endClients, read by check after the workloads stopped.
	early  bool // it had exited before it was told to
	killed bool // it did not exit within lockProcGrace and was killed
}

func (w *lockProcs) start(r *run) {
	if err := w.serve(); err != nil {
		r.Anomaly("lockproc: serve the resource: %v", err)
		return
	}
	for i := range lockProcClients {
		p, err := w.startClient(r, i)
		if err != nil {
			r.Anomaly("lockproc: %v", err)
			continue
		}
		w.clients = append(w.clients, p)
	}
	r.lockHolders = w
	r.Workers.Add(1)
	go func() {
		defer r.Workers.Done()
		<-r.Stopping()
		w.endClients(r)
		_ = w.server.Close()
	}()
}

// serve starts the resource on a loopback port: fencing.Middleware over a
// handler that applies every write it is handed, wrapped in w.record.
func (w *lockProcs) serve() error {
	w.changed = make(chan struct{})
	w.guard = check.NewLoggingGuard(w.unchecked)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	apply := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
	guarded := fencing.Middleware(w.guard, func(*http.Request) string { return lockProcResource }, apply)
	w.server = &http.Server{Handler: w.record(guarded), ReadHeaderTimeout: 10 * time.Second}
	w.url = "http://" + listener.Addr().String() + "/resource"
	go func() { _ = w.server.Serve(listener) }()
	return nil
}

// record logs every write next answers, with the writer's PID.
func (w *lockProcs) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		arrived := time.Now()
		pid, err := strconv.Atoi(req.Header.Get(writerPIDHeader))
		if err != nil {
			http.Error(rw, "missing or bad "+writerPIDHeader+" header", http.StatusBadRequest)
			return
		}
		token, _ := strconv.ParseUint(req.Header.Get(api.HeaderFencingToken), 10, 64)
		recorder := &statusRecorder{ResponseWriter: rw, status: http.StatusOK}
		next.ServeHTTP(recorder, req)
		w.mu.Lock()
		defer w.mu.Unlock()
		skewed := req.Header.Get(skewedHeader) == "1"
		w.writes = append(w.writes, procWrite{pid: pid, token: token, status: recorder.status, arrived: arrived, skewed: skewed})
		close(w.changed)
		w.changed = make(chan struct{})
	})
}

// startClient starts lock client i: this test binary, run again with
// lockClientEnv set.
func (w *lockProcs) startClient(r *run, i int) (*lockClientProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the test binary: %w", err)
	}
	cfg := lockClientConfig{
		Endpoints: r.cluster.URLs(), Resource: w.url, Lock: lockProcName, SessionTimeout: sessionTimeout,
		Seed: r.cfg.Seed*lockProcClients + uint64(i), Lifetime: r.cfg.Duration + 10*time.Minute,
		Token: r.tokens[lockProcUser.name],
	}
	if sec := r.cluster.Security; sec != nil {
		cfg.TLS = client.TLSFiles{CAFile: sec.ClientCAFile, CertFile: sec.UserCertFile, KeyFile: sec.UserKeyFile}
	}
	encoded, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode the lock client configuration: %w", err)
	}
	p := &lockClientProcess{output: &tailBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(self)
	p.cmd.Env = append(os.Environ(), lockClientEnv+"="+string(encoded))
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	p.cmd.SysProcAttr = lockClientProcAttr()
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("lock client %d: stdin: %w", i, err)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start lock client %d: %w", i, err)
	}
	p.stdin, p.pid = stdin, p.cmd.Process.Pid
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	r.Logf("chaos lockproc: client %d is pid %d (seed %d)", i, p.pid, cfg.Seed)
	return p, nil
}

// endClients closes every client's stdin, which makes it exit, and reaps
// it; a client still running after lockProcGrace is killed by its PID.
func (w *lockProcs) endClients(r *run) {
	for _, p := range w.clients {
		select {
		case <-p.exited:
			p.early = true
		default:
		}
		_ = p.stdin.Close()
	}
	grace := time.NewTimer(lockProcGrace)
	defer grace.Stop()
	for _, p := range w.clients {
		select {
		case <-p.exited:
			continue
		case <-grace.C:
		}
		p.killed = true
		r.Logf("chaos lockproc: client pid %d still runs %v after its stdin closed; killing it", p.pid, lockProcGrace)
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// client returns the client process with pid, or nil.
func (w *lockProcs) client(pid int) *lockClientProcess {
	for _, p := range w.clients {
		if p.pid == pid {
			return p
		}
	}
	return nil
}

// await waits up to timeout until done, run with w.mu held now and after
// every write, returns true; it reports whether it did.
func (w *lockProcs) await(timeout time.Duration, done func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		ok, changed := done(), w.changed
		w.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// waitWrite waits up to timeout for a write, from the index-th on, that
// match accepts, and reports whether one came. match runs with w.mu held.
func (w *lockProcs) waitWrite(index int, timeout time.Duration, match func(procWrite) bool) bool {
	return w.await(timeout, func() bool {
		for ; index < len(w.writes); index++ {
			if match(w.writes[index]) {
				return true
			}
		}
		return false
	})
}

// holderAtWork waits up to timeout for a holder at work: the newest
// accepted write is the first with its token, so its client holds the lock
// and works before writing again. It returns that write and the number of
// writes so far; ok is false when none came (the lock does not move: a
// fault before this one may still be felt).
func (w *lockProcs) holderAtWork(timeout time.Duration) (holder procWrite, writes int, ok bool) {
	ok = w.await(timeout, func() bool {
		newest, first, found := w.newestAcceptedLocked()
		holder, writes = newest, len(w.writes)
		return found && first
	})
	if !ok {
		return procWrite{}, 0, false
	}
	return holder, writes, true
}

// newestAcceptedLocked returns the newest accepted write and whether it is
// the first accepted write with its token. w.mu must be held.
func (w *lockProcs) newestAcceptedLocked() (newest procWrite, first, ok bool) {
	i := len(w.writes) - 1
	for i >= 0 && !w.writes[i].accepted() {
		i--
	}
	if i < 0 {
		return procWrite{}, false, false
	}
	newest = w.writes[i]
	for _, earlier := range w.writes[:i] {
		if earlier.accepted() && earlier.token == newest.token {
			return newest, false, true
		}
	}
	return newest, true, true
}

// processAtWork waits up to 2s for a holder at work (holderAtWork) and
// returns its process, its newest write and the number of writes so far.
func (w *lockProcs) processAtWork() (*lockClientProcess, procWrite, int, error) {
	holder, from, ok := w.holderAtWork(2 * time.Second)
	if !ok {
		return nil, procWrite{}, 0, errors.New("no lock holder at work (a first write with a new token) within 2s")
	}
	p := w.client(holder.pid)
	if p == nil {
		return nil, procWrite{}, 0, fmt.Errorf("pid %d is no lock client", holder.pid)
	}
	return p, holder, from, nil
}

// pauseLockHolder is the pause-lock-holder fault: SIGSTOP the lock client
// that made the newest accepted write, waiting for one at work (see
// holderAtWork) so that it has a write left to make with its token. The heal waits until its session expired and the lock
// moved on (another client's write with a higher token was accepted), up
// to 4 session timeouts and 5s, then SIGCONTs it.
func (r *run) pauseLockHolder() (func() error, error) {
	w := r.lockHolders
	p, holder, from, err := w.processAtWork()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("SIGSTOP lock client %d: %w", p.pid, err)
	}
	r.Logf("chaos lockproc: SIGSTOP lock client %d, which wrote with token %d", p.pid, holder.token)
	return func() error { return w.resume(p, holder, from) }, nil
}

// resume is the heal of pauseLockHolder: it waits until the guard accepted
// a token above the stopped holder's from another client, then SIGCONTs
// the holder.
func (w *lockProcs) resume(p *lockClientProcess, holder procWrite, from int) error {
	limit := 4*sessionTimeout + 5*time.Second
	moved := w.waitWrite(from, limit, func(write procWrite) bool {
		return write.accepted() && write.pid != holder.pid && write.token > holder.token
	})
	pause := holderPause{pid: p.pid, token: holder.token, moved: moved, highest: w.guard.Highest(lockProcResource), resumed: time.Now()}
	w.mu.Lock()
	w.pauses = append(w.pauses, pause)
	w.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT lock client %d: %w", p.pid, err)
	}
	if !moved {
		return fmt.Errorf("lock %s did not move from stopped holder pid %d (token %d) within %v", lockProcName, p.pid, holder.token, limit)
	}
	return nil
}

func (w *lockProcs) check(r *run) error {
	if w.server == nil {
		return errors.New("lockproc: the resource did not start")
	}
	w.checkClients(r)
	accepted, stale := w.guard.CheckOrder(r.Run, "lockproc")
	w.mu.Lock()
	defer w.mu.Unlock()
	refused, writers := w.checkWritersLocked(r)
	resumedStale, resumedRefused := w.checkPausesLocked(r)
	overlapping, skewed := w.tenuresLocked()
	r.Update(func(report *Report) {
		report.Operations += len(w.writes)
		report.Overlaps += refused
		report.OverlappingTenures += overlapping
		report.SkewedLockHolds += skewed
		report.ResumedStaleWrites += resumedStale
		report.ResumedRefused += resumedRefused
	})
	r.Logf("chaos lockproc: %d writes accepted from %d client processes, %d stale writes refused by the guard; "+
		"%d holders stopped, %d wrote again with their old token once resumed, %d of those refused; "+
		"%d tenures on a skewed clock, %d tenures overlapping in real time; %d stale accepted",
		accepted, writers, refused, len(w.pauses), resumedStale, resumedRefused, skewed, overlapping, stale)
	if writers < 2 {
		r.Anomaly("liveness: lockproc: writes accepted from %d client processes, want at least 2", writers)
	}
	return nil
}

// checkClients reports the clients that exited before they were told to,
// or that failed (a race report or a panic).
func (w *lockProcs) checkClients(r *run) {
	for _, p := range w.clients {
		switch {
		case p.early:
			r.Anomaly("lockproc: client pid %d exited before the run ended: %v; its output ends:\n%s", p.pid, p.err, p.output)
		case p.err != nil && !p.killed:
			r.Anomaly("lockproc: client pid %d failed: %v; its output ends:\n%s", p.pid, p.err, p.output)
		default:
			r.Logf("chaos lockproc: client pid %d: %s", p.pid, p.output.lastLine())
		}
	}
}

// checkWritersLocked checks that each accepted token came from one client
// process, and returns the writes refused as stale and the number of
// processes that had a write accepted. w.mu must be held.
func (w *lockProcs) checkWritersLocked(r *run) (refused, writers int) {
	owner := map[uint64]int{}
	shared := map[uint64]bool{}
	pids := map[int]bool{}
	for _, write := range w.writes {
		if write.status == http.StatusConflict {
			refused++
		}
		if !write.accepted() {
			continue
		}
		pids[write.pid] = true
		other, seen := owner[write.token]
		if !seen {
			owner[write.token] = write.pid
		} else if other != write.pid && !shared[write.token] {
			shared[write.token] = true
			r.Anomaly("F: fencing token %d written by client processes %d and %d", write.token, other, write.pid)
		}
	}
	return refused, len(pids)
}

// checkPausesLocked checks that every stopped holder's first write after
// it resumed, when made with a token below the guard's highest then (its
// old token, not a new tenure's), was refused. It returns how many such
// writes there were and how many were refused. w.mu must be held.
func (w *lockProcs) checkPausesLocked(r *run) (stale, refused int) {
	for _, pause := range w.pauses {
		next, ok := w.firstWriteLocked(pause.pid, pause.resumed)
		if !pause.moved || !ok || next.token >= pause.highest {
			continue // the lock stayed, no write followed, or a new tenure's
		}
		stale++
		if next.accepted() {
			r.Anomaly("F: lock client %d, stopped after writing with token %d and resumed once the guard had accepted token %d, wrote with token %d and the guard accepted it",
				pause.pid, pause.token, pause.highest, next.token)
			continue
		}
		refused++
	}
	return stale, refused
}

// tenuresLocked counts the tenures (tokens) that overlapped a later one in
// real time (a write with the token arrived after the guard had accepted a
// higher one: the guard refused it) and those during which the client's
// clock ran skewed. w.mu must be held.
func (w *lockProcs) tenuresLocked() (overlapping, skewed int) {
	overlapped, onSkew := map[uint64]bool{}, map[uint64]bool{}
	for _, write := range w.writes {
		if write.status == http.StatusConflict {
			overlapped[write.token] = true
		}
		if write.skewed {
			onSkew[write.token] = true
		}
	}
	return len(overlapped), len(onSkew)
}

// skewLockProc is the clock-skew-lock-proc fault: the clock (keepalives and
// work) of the lock client process that holds the lock and works (see
// holderAtWork) runs at slowClient until healed, so its session expires
// while it believes it holds the lock and works on.
func (r *run) skewLockProc() (func() error, error) {
	p, _, _, err := r.lockHolders.processAtWork()
	if err != nil {
		return nil, err
	}
	if err := p.setRate(slowClient); err != nil {
		return nil, err
	}
	r.Logf("chaos lockproc: lock client %d's clock runs at %vx", p.pid, slowClient)
	return func() error { return p.setRate(1) }, nil
}

// setRate tells the client process to run its clock at rate.
func (p *lockClientProcess) setRate(rate float64) error {
	if _, err := fmt.Fprintf(p.stdin, "%s %g\n", rateCommand, rate); err != nil {
		return fmt.Errorf("lock client %d: set its clock rate: %w", p.pid, err)
	}
	return nil
}

// firstWriteLocked returns the first write of pid that arrived after
// since. w.mu must be held.
func (w *lockProcs) firstWriteLocked(pid int, since time.Time) (procWrite, bool) {
	var first procWrite
	found := false
	for _, write := range w.writes {
		if write.pid == pid && write.arrived.After(since) && (!found || write.arrived.Before(first.arrived)) {
			first, found = write, true
		}
	}
	return first, found
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(status int) {
	s.status = status
	s.ResponseWriter.WriteHeader(status)
}

// tailBuffer keeps the last tailBytes of a process's output; safe for
// concurrent use.
type tailBuffer struct {
	mu   sync.Mutex // guards data
	data []byte
}

const tailBytes = 8 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.data = append(b.data, p...)
	if len(b.data) > tailBytes {
		b.data = append([]byte(nil), b.data[len(b.data)-tailBytes:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.data)
}

// lastLine returns the last non-empty line written.
func (b *tailBuffer) lastLine() string {
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	return lines[len(lines)-1]
}
