package check

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// SessionTimeout is the lock and ephemeral workloads' session timeout (a
// cluster may grant a longer one: the workloads use what it granted).
const SessionTimeout = 2 * time.Second

// Member is one member of the cluster under check, as the per-replica
// checks at the end read it.
type Member struct {
	Name      string // how findings name it
	ClientURL string // http://host:port of its client API
}

// Target is the cluster a Run sends its requests to.
type Target interface {
	// URLs are the client URLs requests go to, one picked at random per
	// request; a workload retries elsewhere when one does not answer.
	URLs() []string
	// Members are every member the final checks read one by one.
	Members() []Member
}

// Endpoints is a Target of fixed client URLs, each one member (what a user
// names with latchctl's --endpoints).
type Endpoints []string

// URLs implements Target.
func (e Endpoints) URLs() []string { return e }

// Members implements Target: each URL is a member named by its URL.
func (e Endpoints) Members() []Member {
	members := make([]Member, len(e))
	for i, u := range e {
		members[i] = Member{Name: u, ClientURL: u}
	}
	return members
}

// Options configure a Run.
type Options struct {
	Seed   uint64 // drives the workloads' choices
	Target Target
	// Prefix is put before every key the workloads write ("" writes at
	// the root, as the fault suite on its own cluster does); it must not
	// end in "/".
	Prefix string
	// LockName is the lock workload's lock (a path segment: its queue is
	// /locks/LockName); default "chaos".
	LockName string
	// OutDir receives the HTML visualization of a history that is not
	// linearizable; default os.TempDir().
	OutDir string
	// Logf logs progress; default: nothing.
	Logf func(format string, args ...any)
	// HTTP sends every request of the workloads and checks; default
	// HTTPClient. NewHTTPClient makes one for TLS and a login token.
	HTTP *http.Client
}

// Run is one run of workloads against a Target: the workloads' shared
// state (the seeded choices, the stop signal, the report) and their
// goroutines. Start the workloads, let them run, Stop them, bring the
// cluster to rest, then Check them.
type Run struct {
	Options
	// Report collects findings and counts. Workloads change it through
	// Anomaly and Update while they run; checks, which run one at a time
	// after Stop, may also change it directly.
	Report *Report
	// Workers counts the workloads' goroutines; Stop waits for them.
	Workers sync.WaitGroup

	reportMu sync.Mutex // guards Report while workloads run
	stop     chan struct{}
	stopOnce sync.Once
	randMu   sync.Mutex // guards random
	random   *rand.Rand
	// acked counts the operations acknowledged so far (NoteAcked).
	acked atomic.Int64
}

// NewRun returns a Run reporting into report.
func NewRun(opts Options, report *Report) *Run {
	if opts.LockName == "" {
		opts.LockName = "chaos"
	}
	if opts.OutDir == "" {
		opts.OutDir = os.TempDir()
	}
	if opts.HTTP == nil {
		opts.HTTP = HTTPClient
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	return &Run{
		Options: opts, Report: report, stop: make(chan struct{}),
		random: rand.New(rand.NewPCG(opts.Seed, 0x6c61746368)),
	}
}

// Anomaly records a finding; safe for concurrent use.
func (r *Run) Anomaly(format string, args ...any) {
	r.Update(func(report *Report) { report.anomaly(format, args...) })
}

// Update changes the report under its lock; safe for concurrent use.
func (r *Run) Update(change func(*Report)) {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	change(r.Report)
}

// NoteAcked counts one acknowledged operation while the workloads run, so
// a driver can go on until enough were acknowledged rather than for a fixed
// time (a loaded machine does fewer per second); safe for concurrent use.
// The set workload counts its creates.
func (r *Run) NoteAcked() { r.acked.Add(1) }

// AckedSoFar is the number of NoteAcked calls so far.
func (r *Run) AckedSoFar() int64 { return r.acked.Load() }

// Intn draws from the run's seeded source; safe for concurrent use.
func (r *Run) Intn(n int) int {
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return r.random.IntN(n)
}

// Node picks a member's client URL at random.
func (r *Run) Node() string {
	urls := r.Target.URLs()
	return urls[r.Intn(len(urls))]
}

// Call is the package's Call sent with the run's client (Options.HTTP).
func (r *Run) Call(ctx context.Context, method, base, path string, query url.Values, in, out any) error {
	return CallWith(ctx, r.HTTP, method, base, path, query, in, out)
}

// Members are the members the final checks read.
func (r *Run) Members() []Member { return r.Target.Members() }

// Key is path under the run's prefix.
func (r *Run) Key(path string) string { return r.Prefix + path }

// Stopping is closed when the workloads must stop.
func (r *Run) Stopping() <-chan struct{} { return r.stop }

// Stopped reports whether the workloads must stop.
func (r *Run) Stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// Stop tells the workloads to stop and waits until their goroutines ended.
func (r *Run) Stop() {
	r.stopOnce.Do(func() { close(r.stop) })
	r.Workers.Wait()
}

// Workload is one kind of client activity and its checker.
type Workload interface {
	// Start launches goroutines counted in r.Workers; they end when
	// r.Stopping closes.
	Start(r *Run)
	// Check runs after Stop, once the cluster is at rest: it adds its
	// findings to r.Report. An error means it could not check.
	Check(r *Run) error
}

// WorkloadNames are the workloads of this package, in the order they run.
var WorkloadNames = []string{"register", "set", "lock", "ephemeral"}

// NewWorkload returns the workload called name: "register" (L),
// "set" (Q and D), "lock" (F) or "ephemeral" (S). uncheckedGuard plants
// bug (c) in the lock workload: a fencing guard that accepts every token.
func NewWorkload(name string, uncheckedGuard bool) (Workload, error) {
	switch name {
	case "register":
		return &registers{}, nil
	case "set":
		return &sequences{}, nil
	case "lock":
		return &locks{unchecked: uncheckedGuard}, nil
	case "ephemeral":
		return &sessions{}, nil
	}
	return nil, fmt.Errorf("check: no workload %q (want one of %v)", name, WorkloadNames)
}

// RequestContext bounds one client request.
func RequestContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 3*time.Second)
}
