package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/client/recipe"
)

// EnvFencingToken names the variable that carries the fencing token to the
// command run by 'lock' and 'elect'.
const EnvFencingToken = "LATCH_FENCING_TOKEN"

// exitError makes Run exit with code: a child command's own exit code, or
// one of ExitLost, ExitCannotRun and ExitCommandAbsent.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// newSession makes the session of a long-running command.
func (a *app) newSession(cmd *cobra.Command, c *client.Client, timeout time.Duration) (*client.Session, error) {
	ctx, cancel := a.commandContext(cmd)
	defer cancel()
	return c.NewSession(ctx, timeout)
}

// closeSession closes s, bounded by --command-timeout.
func (a *app) closeSession(s *client.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), a.commandTimeout)
	defer cancel()
	_ = s.Close(ctx)
}

func (a *app) watchCommand() *cobra.Command {
	var recursive, persistent bool
	var knownIndex uint64
	var sessionTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "watch PATH",
		Short: "print the changes of a node (-r: of a subtree) until interrupted (one-shot without --persistent)",
		Long: "watch registers a watch on PATH over a session of its own and prints each event as\n" +
			"'INDEX EVENT PATH version N' (-o json: one JSON object a line). Without --persistent it\n" +
			"exits after the first event. Lost event streams are resumed with known_index: an event\n" +
			"marked 'resync' says changes were coalesced and the node should be read again.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := a.newSession(cmd, c, sessionTimeout)
			if err != nil {
				return err
			}
			defer a.closeSession(s)
			opts := []client.WatchOption{client.KnownIndex(knownIndex)}
			if recursive {
				opts = append(opts, client.WatchRecursive())
			}
			if persistent {
				opts = append(opts, client.Persistent())
			}
			w, err := s.Watch(cmd.Context(), args[0], opts...)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.io.Stderr, "watching %s (version %d)\n", args[0], w.CurrentVersion())
			return a.printEvents(w)
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "watch the whole subtree")
	cmd.Flags().BoolVar(&persistent, "persistent", false, "print every change until interrupted")
	cmd.Flags().Uint64Var(&knownIndex, "known-index", 0, "fire at once if the node changed after this index")
	cmd.Flags().DurationVar(&sessionTimeout, "session-timeout", 10*time.Second, "timeout of the watch's session")
	return cmd
}

// printEvents prints w's events until it ends; an interrupt is success.
func (a *app) printEvents(w *client.Watcher) error {
	encoder := json.NewEncoder(a.io.Stdout)
	for ev := range w.Events() {
		if a.output == "json" {
			if err := encoder.Encode(ev); err != nil {
				return err
			}
			continue
		}
		resync := ""
		if ev.Resync {
			resync = " (resync)"
		}
		fmt.Fprintf(a.io.Stdout, "%d %s %s version %d%s\n", ev.Index, ev.Event.Event, ev.Path, ev.Version, resync)
	}
	if err := w.Err(); err != nil && !errors.Is(err, client.ErrWatchClosed) {
		return err
	}
	return nil
}

// childOptions are the flags of the commands that run a child.
type childOptions struct {
	sessionTimeout time.Duration
	grace          time.Duration
}

func (o *childOptions) flags(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&o.sessionTimeout, "session-timeout", 10*time.Second,
		"session timeout: how long a lost process may keep the lock or leadership")
	cmd.Flags().DurationVar(&o.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when CMD must stop")
}

func (a *app) lockCommand() *cobra.Command {
	var opts childOptions
	cmd := &cobra.Command{
		Use:   "lock NAME -- CMD [ARG...]",
		Short: "run CMD while holding lock NAME, with " + EnvFencingToken + " in its environment",
		Long: "lock waits for lock NAME, then runs CMD with the fencing token in " + EnvFencingToken + ".\n" +
			"If the lock is lost (the session expired or could not be kept alive) CMD gets SIGTERM,\n" +
			"then SIGKILL after --grace, and latchctl exits 124. An interrupt while waiting gives up the\n" +
			"place in the queue; while CMD runs, it is passed on as SIGTERM. Otherwise latchctl exits\n" +
			"with CMD's exit code and releases the lock. latchctl's own failures exit 125 (before CMD\n" +
			"ran), 126 (CMD could not be started) or 127 (CMD not found); see 'latchctl --help'.",
		Args:        cobra.MinimumNArgs(2),
		Annotations: map[string]string{annotationRunsCommand: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return usagef("want: latchctl lock NAME -- CMD [ARG...]")
			}
			return a.runHolding(cmd, opts, args[1:], func(ctx context.Context, s *client.Session) (holder, error) {
				l := recipe.NewLock(s, args[0])
				if _, err := l.Acquire(ctx); err != nil {
					return nil, err
				}
				return l, nil
			})
		},
	}
	opts.flags(cmd)
	return cmd
}

func (a *app) electCommand() *cobra.Command {
	var opts childOptions
	var value string
	cmd := &cobra.Command{
		Use:   "elect ROLE -- CMD [ARG...]",
		Short: "campaign for ROLE and run CMD while leader, with " + EnvFencingToken + " in its environment",
		Long: "elect joins the election of ROLE with --value and waits until it leads, then runs CMD\n" +
			"with the leader's fencing token in " + EnvFencingToken + ". Losing the leadership stops CMD\n" +
			"(SIGTERM, SIGKILL after --grace) and exits 124; otherwise latchctl exits with CMD's code\n" +
			"and resigns. latchctl's own failures exit 125 (before CMD ran), 126 (CMD could not be\n" +
			"started) or 127 (CMD not found); see 'latchctl --help'.",
		Args:        cobra.MinimumNArgs(2),
		Annotations: map[string]string{annotationRunsCommand: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return usagef("want: latchctl elect ROLE -- CMD [ARG...]")
			}
			return a.runHolding(cmd, opts, args[1:], func(ctx context.Context, s *client.Session) (holder, error) {
				if value == "" {
					host, _ := os.Hostname()
					value = fmt.Sprintf("%s:%d", host, os.Getpid())
				}
				e := recipe.NewElection(s, args[0])
				if _, err := e.Campaign(ctx, value); err != nil {
					return nil, err
				}
				return electionHolder{e}, nil
			})
		},
	}
	opts.flags(cmd)
	cmd.Flags().StringVar(&value, "value", "", "the candidate's value, shown to observers (default: host name and pid)")
	return cmd
}

// holder is a held lock or leadership.
type holder interface {
	Token() uint64
	Lost() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// electionHolder gives an Election the holder shape.
type electionHolder struct{ *recipe.Election }

func (e electionHolder) Err() error {
	select {
	case <-e.Lost():
		return fmt.Errorf("leadership of %s: %w", e.Role(), recipe.ErrLost)
	default:
		return nil
	}
}

func (e electionHolder) Release(ctx context.Context) error { return e.Resign(ctx) }

// runHolding gets a holder with take, runs the child while it holds and
// gives it back.
func (a *app) runHolding(cmd *cobra.Command, opts childOptions, argv []string,
	take func(ctx context.Context, s *client.Session) (holder, error)) error {
	c, err := a.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := a.newSession(cmd, c, opts.sessionTimeout)
	if err != nil {
		return err
	}
	defer a.closeSession(s)
	h, err := take(cmd.Context(), s)
	if err != nil {
		return err
	}
	token := h.Token()
	fmt.Fprintf(a.io.Stderr, "latchctl: holding with fencing token %d; running %s\n", token, argv[0])
	code, lost, err := a.runChild(cmd.Context(), argv, token, h.Lost(), opts.grace)
	if lost {
		return &exitError{code: ExitLost, err: fmt.Errorf("lost while %s ran (stopped it): %w", argv[0], h.Err())}
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.commandTimeout)
	defer cancel()
	if releaseErr := h.Release(ctx); releaseErr != nil && err == nil {
		fmt.Fprintf(a.io.Stderr, "latchctl: release: %v\n", releaseErr)
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return &exitError{code: code, err: fmt.Errorf("%s exited with code %d", argv[0], code)}
	}
	return nil
}

// runChild runs argv with the token in its environment until it exits. When
// lost closes or ctx ends first, it stops the child: SIGTERM, then SIGKILL
// after grace. It returns the child's exit code and whether lost closed.
func (a *app) runChild(ctx context.Context, argv []string, token uint64, lost <-chan struct{}, grace time.Duration) (int, bool, error) {
	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = a.io.Stdin, a.io.Stdout, a.io.Stderr
	child.Env = append(os.Environ(), EnvFencingToken+"="+strconv.FormatUint(token, 10))
	if err := child.Start(); err != nil {
		return 0, false, &exitError{code: startFailureCode(err), err: fmt.Errorf("start %s: %w", argv[0], err)}
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	wasLost := false
	select {
	case err := <-exited:
		return exitCodeOf(err), false, nil
	case <-lost:
		wasLost = true
	case <-ctx.Done():
	}
	_ = child.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		return exitCodeOf(err), wasLost, nil
	case <-time.After(grace):
		_ = child.Process.Kill()
		return exitCodeOf(<-exited), wasLost, nil
	}
}

// startFailureCode is the exit code for a child that could not be started:
// ExitCommandAbsent if it does not exist, else ExitCannotRun (not
// executable, not a program), as shells and env(1) answer.
func startFailureCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return ExitCommandAbsent
	}
	return ExitCannotRun
}

// exitCodeOf returns a finished child's exit code: 128+N for signal N.
func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return ExitOther
	}
	if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
		return 128 + int(status.Signal())
	}
	return exit.ExitCode()
}

func (a *app) lockStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "lock-status NAME",
		Short: "show who holds lock NAME, with which token, and how many wait",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				state, err := c.LockState(ctx, args[0])
				return a.printResult(state, err, func(w io.Writer) {
					if state.Holder == nil {
						fmt.Fprintf(w, "lock %s is free\n", args[0])
						return
					}
					fmt.Fprintf(w, "lock %s held by session handle %s with fencing token %d (%s); %d waiting\n",
						args[0], state.Holder.SessionHandle, state.Holder.FencingToken, state.Holder.Path, state.Waiters)
				})
			})
		},
	}
}

func (a *app) electionStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "election-status ROLE",
		Short: "show the leader of ROLE, its value and token, and how many candidates there are",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				state, err := c.ElectionState(ctx, args[0])
				return a.printResult(state, err, func(w io.Writer) {
					if state.Leader == nil {
						fmt.Fprintf(w, "%s has no leader\n", args[0])
						return
					}
					fmt.Fprintf(w, "%s led by session handle %s (value %q) with fencing token %d; %d candidates\n",
						args[0], state.Leader.SessionHandle, state.Leader.Value, state.Leader.FencingToken, state.Candidates)
				})
			})
		},
	}
}
