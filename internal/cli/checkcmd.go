package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/check"
)

// checkFlags are the flags of 'latchctl check'.
type checkFlags struct {
	prefix    string
	duration  time.Duration
	seed      uint64
	workloads []string
	out       string
	// settle bounds the waits after the workloads stop: for every member to
	// answer, and for the cleanup.
	settle time.Duration
}

// errAnomalies is the error of a check that found anomalies (exit code 1).
var errAnomalies = errors.New("check found anomalies")

func (a *app) checkCommand() *cobra.Command {
	var f checkFlags
	cmd := &cobra.Command{
		Use:   "check",
		Short: "run the fault suite's workloads and checkers against this cluster while you inject faults",
		Long: "check runs the fault suite's workloads (register: Porcupine linearizability; set: sequential\n" +
			"creates unique, ordered and on every member; lock: writes fenced by tokens never go back;\n" +
			"ephemeral: nodes live exactly as long as their session) against the cluster of --endpoints\n" +
			"for --duration, while you inject your own faults (rolling restarts, network changes). Then it\n" +
			"prints the suite's one-line summary and exits 1 on any anomaly, 0 on none. List every member in\n" +
			"--endpoints: the final checks read each one. Only keys under --prefix are written (and the lock\n" +
			"latchctl-check<prefix>); everything written is removed at the end, also on Ctrl-C.\n" +
			"A history that is not linearizable is written as an HTML visualization into --out.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("seed") {
				f.seed = rand.Uint64() % 1_000_000_000
			}
			return a.runCheck(cmd.Context(), f)
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&f.prefix, "prefix", "/check", "absolute path under which the check writes (not /)")
	flags.DurationVar(&f.duration, "duration", time.Minute, "how long the workloads run")
	flags.Uint64Var(&f.seed, "seed", 0, "seed of the workloads' choices (default: a random one, printed)")
	flags.StringSliceVar(&f.workloads, "workloads", check.WorkloadNames, "workloads to run")
	flags.StringVar(&f.out, "out", ".", "directory for the visualization of a failing history")
	flags.DurationVar(&f.settle, "settle-timeout", time.Minute, "bound on waiting for every member to answer after the run, and on the cleanup")
	return cmd
}

// checkPrefix refuses a prefix the check must not write under.
func checkPrefix(prefix string) error {
	if !strings.HasPrefix(prefix, "/") || prefix == "/" {
		return usagef("--prefix %q: want an absolute path other than /", prefix)
	}
	if err := api.ValidatePath(prefix); err != nil {
		return usagef("--prefix: %v", err)
	}
	for _, reserved := range []string{"/locks", "/elections"} {
		if prefix == reserved || strings.HasPrefix(prefix, reserved+"/") {
			return usagef("--prefix %q: %s is reserved for locks and elections", prefix, reserved)
		}
	}
	return nil
}

// checkEndpoints returns the endpoints as client URLs (http:// added when
// no scheme is given).
func checkEndpoints(endpoints []string) ([]string, error) {
	var urls []string
	for _, e := range endpoints {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || u.Scheme != "http" {
			return nil, usagef("--endpoints: %q is not an http://host:port URL", e)
		}
		urls = append(urls, u.Scheme+"://"+u.Host)
	}
	if len(urls) == 0 {
		return nil, usagef("--endpoints: none given")
	}
	return urls, nil
}

// lockNameFor is the check's lock name for prefix: one path segment.
func lockNameFor(prefix string) string {
	name := []byte("latchctl-check" + prefix)
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			name[i] = '_'
		}
	}
	return string(name)
}

func (a *app) runCheck(ctx context.Context, f checkFlags) error {
	if err := checkPrefix(f.prefix); err != nil {
		return err
	}
	urls, err := checkEndpoints(a.endpoints)
	if err != nil {
		return err
	}
	workloads, err := newCheckWorkloads(f.workloads)
	if err != nil {
		return err
	}
	if err := checkOutDir(f.out); err != nil {
		return err
	}
	if err := waitAnswering(ctx, urls, a.commandTimeout); err != nil {
		return err
	}
	lockName := lockNameFor(f.prefix)
	lockDir := "/locks/" + lockName
	created, err := missingAncestors(urls, f.prefix)
	if err != nil {
		return err
	}
	createdLocks, err := missingAncestors(urls, lockDir)
	if err != nil {
		return err
	}
	created = append(created, createdLocks...)
	base := fmt.Sprintf("%s/run-%d-%x", f.prefix, f.seed, time.Now().UnixNano())
	logf := lineLogger(a.io.Stderr)
	logf("check: seed %d (rerun with --seed %d), %v against %s, keys under %s", f.seed, f.seed, f.duration, strings.Join(urls, ","), base)
	report := check.Report{Seed: f.seed, Runs: 1, Faults: map[string]int{}}
	run := check.NewRun(check.Options{
		Seed: f.seed, Target: check.Endpoints(urls), Prefix: base, LockName: lockName,
		OutDir: f.out, Logf: logf,
	}, &report)
	defer func() {
		if err := cleanUp(urls, base, lockDir, created, f.settle); err != nil {
			logf("check: cleanup: %v", err)
		}
	}()
	for _, w := range workloads {
		w.Start(run)
	}
	interrupted := waitRun(ctx, f.duration)
	run.Stop()
	if interrupted {
		return fmt.Errorf("interrupted: the workloads were stopped; no verdict")
	}
	awaitMembers(run, urls, f.settle)
	for _, w := range workloads {
		if err := w.Check(run); err != nil {
			run.Anomaly("checker could not run: %v", err)
		}
	}
	for _, anomaly := range report.Anomalies {
		fmt.Fprintf(a.io.Stdout, "anomaly: %s\n", anomaly)
	}
	fmt.Fprintln(a.io.Stdout, report.Summary())
	if len(report.Anomalies) > 0 {
		return fmt.Errorf("%w: %d (seed %d)", errAnomalies, len(report.Anomalies), f.seed)
	}
	return nil
}

func newCheckWorkloads(names []string) ([]check.Workload, error) {
	var out []check.Workload
	seen := map[string]bool{}
	for _, name := range names {
		name = strings.TrimSpace(name)
		if seen[name] {
			continue
		}
		seen[name] = true
		w, err := check.NewWorkload(name, false)
		if err != nil {
			return nil, usagef("--workloads: %v", err)
		}
		out = append(out, w)
	}
	if len(out) == 0 {
		return nil, usagef("--workloads: none given")
	}
	return out, nil
}

// lineLogger writes one line per call to w; safe for concurrent use.
func lineLogger(w io.Writer) func(format string, args ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// waitRun waits for d, or until ctx ends (an interrupt): it reports the latter.
func waitRun(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return false
	case <-ctx.Done():
		return true
	}
}

// waitAnswering waits until some endpoint answers GET /v1/status.
func waitAnswering(ctx context.Context, urls []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		for _, u := range urls {
			if last = status(u); last == nil {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return api.Errorf(api.CodeUnavailable, "no endpoint answered within %v: %v", timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func status(u string) error {
	ctx, cancel := check.RequestContext()
	defer cancel()
	return check.Call(ctx, http.MethodGet, u, "/v1/status", nil, nil, nil)
}

// nodeExists reads path linearizably from the first endpoint that answers.
func nodeExists(urls []string, path string) (bool, error) {
	var last error
	for _, u := range urls {
		ctx, cancel := check.RequestContext()
		err := check.CallKV(ctx, http.MethodGet, u, path, nil, nil, nil)
		cancel()
		switch {
		case err == nil:
			return true, nil
		case check.Code(err) == api.CodeNotFound:
			return false, nil
		}
		last = err
	}
	return false, fmt.Errorf("read %s: %w", path, last)
}

// awaitMembers waits until every member answers /v1/status; one that does
// not within timeout is a liveness finding (the checks that read it fail).
func awaitMembers(run *check.Run, urls []string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, u := range urls {
		for err := status(u); err != nil; err = status(u) {
			if time.Now().After(deadline) {
				run.Anomaly("liveness: %s did not answer within %v after the workloads stopped: %v", u, timeout, err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// missingAncestors returns prefix and those of its ancestors that do not
// exist, deepest first: the check's writes create them (docs/api.md: missing
// ancestors are created), so its cleanup deletes them again.
func missingAncestors(urls []string, prefix string) ([]string, error) {
	var missing []string
	for p := prefix; p != "/"; p = api.Parent(p) {
		exists, err := nodeExists(urls, p)
		if err != nil {
			return nil, err
		}
		if exists {
			break
		}
		missing = append(missing, p)
	}
	return missing, nil
}

// cleanUp removes what the check wrote, retrying on every endpoint until
// timeout (an ephemeral node of a session not yet expired refuses a delete
// until it expires): base and everything under it; the lock's queue
// directory lockDir; then, deepest first, the nodes of created (the prefix,
// the lock directory's and their ancestors the check's writes created) that
// nothing else uses: a node with children (another writer's) stays.
func cleanUp(urls []string, base, lockDir string, created []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if err := deleteUntil(urls, base, true, deadline); err != nil {
		return err
	}
	if err := deleteUntil(urls, lockDir, false, deadline); err != nil {
		return err
	}
	for _, p := range created {
		ctx, cancel := check.RequestContext()
		err := check.CallKV(ctx, http.MethodDelete, urls[0], p, nil, nil, nil)
		cancel()
		switch check.Code(err) {
		case "", api.CodeNotFound, api.CodePreconditionFailed: // gone, or another writer's children keep it
		default:
			return fmt.Errorf("delete %s: %w", p, err)
		}
	}
	return nil
}

// deleteUntil deletes path (recursively or not) on the endpoints in turn
// until it is gone or deadline passes.
func deleteUntil(urls []string, path string, recursive bool, deadline time.Time) error {
	query := url.Values{}
	if recursive {
		query.Set("recursive", "true")
	}
	for i := 0; ; i++ {
		ctx, cancel := check.RequestContext()
		err := check.CallKV(ctx, http.MethodDelete, urls[i%len(urls)], path, query, nil, nil)
		cancel()
		if err == nil || check.Code(err) == api.CodeNotFound {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("delete %s: %w", path, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkOutDir makes sure dir exists for the visualization.
func checkOutDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usagef("--out: %v", err)
	}
	return nil
}
