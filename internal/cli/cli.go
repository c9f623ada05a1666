// Package cli is latchctl: the command-line client of latch, built with
// cobra over the public client package. cmd/latchctl is a thin main over Run.
//
// Every command talks to the endpoints of --endpoints (or the
// LATCH_ENDPOINTS environment variable, comma-separated; default
// http://127.0.0.1:2379, the single-node latchd). Output is for people by
// default and JSON with -o json. Errors go to stderr, and the exit code says
// what kind of failure it was (exitCodesHelp, shown by 'latchctl --help'):
//
//	0  success
//	1  usage error, or any other failure
//	2  not found (node, session, member), or the session expired
//	3  precondition failed (prev_version mismatch, node exists, has children; lock not held; membership change refused)
//	4  unavailable (no server reachable, no quorum, overloaded, timed out, session lost)
//	5  unauthenticated or permission denied
//
// 'lock' and 'elect' run a command and exit with its exit code (128+S if a
// signal S killed it). Their own outcomes use the codes of timeout(1) and
// env(1) instead of 1 to 4, so that a command's 2 is never taken for
// latchctl's "not found":
//
//	124  the lock or leadership was lost while the command ran (it was stopped)
//	125  latchctl failed before the command ran (usage, cluster unreachable, session lost, interrupted)
//	126  the command was found but could not be started
//	127  the command was not found
//
// Coordination commands:
//
//	watch PATH [-r] [--persistent] [--known-index N]
//	    prints 'INDEX EVENT PATH version N' a line (-o json: JSON lines) until interrupted;
//	    one-shot (exits after one event) without --persistent.
//	lock NAME [--session-timeout D] [--grace D] -- CMD [ARG...]
//	    waits for the lock, runs CMD with LATCH_FENCING_TOKEN set, stops CMD (SIGTERM, then
//	    SIGKILL after --grace) if the lock is lost, releases it when CMD exits.
//	elect ROLE [--value V] [--session-timeout D] [--grace D] -- CMD [ARG...]
//	    the same for leadership of ROLE: CMD runs while this process leads.
//	lock-status NAME, election-status ROLE
//	    the holder (session, fencing token, node) and waiters; the leader and candidates.
//
// check [--prefix P] [--duration D] [--seed N] [--workloads ...] [--out DIR] runs internal/check's
// workloads and checkers against the cluster, prints the summary line and exits 1 on any anomaly;
// it writes under P only (and its lock's queue) and removes what it wrote, also when interrupted.
package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/buildinfo"
)

// Exit codes of latchctl.
const (
	ExitOK           = 0
	ExitOther        = 1
	ExitNotFound     = 2
	ExitPrecondition = 3
	ExitUnavailable  = 4
	ExitDenied       = 5 // unauthenticated or permission denied
)

// Exit codes of the commands that run a command ('lock', 'elect'), which
// otherwise exit with their command's code.
const (
	ExitLost          = 124 // the lock or leadership was lost while the command ran
	ExitHoldFailed    = 125 // latchctl failed before the command ran
	ExitCannotRun     = 126 // the command was found but could not be started
	ExitCommandAbsent = 127 // the command was not found
)

// exitCodesHelp ends 'latchctl --help'.
const exitCodesHelp = `Exit codes:
  0    success
  1    usage error, or any other failure
  2    not found (node, session, member), or the session expired
  3    precondition failed (prev_version mismatch, node exists, has children;
       lock not held; membership change refused)
  4    unavailable (no server reachable, no quorum, overloaded, timed out,
       session lost)
  5    unauthenticated or permission denied (log in, or ask an admin)
'lock' and 'elect' exit with their command's own exit code (128+N if signal N
killed it), and with these codes (as timeout(1) does) for their own outcomes:
  124  the lock or leadership was lost while the command ran (it was stopped)
  125  latchctl failed before the command ran (usage, cluster unreachable,
       session lost, interrupted while waiting)
  126  the command was found but could not be started
  127  the command was not found
A command that itself exits 124 to 127 cannot be told apart from these.`

// annotationRunsCommand marks the commands that run a child command and
// pass its exit code through.
const annotationRunsCommand = "runs-command"

// DefaultEndpoint is the client address of a default single-node latchd.
const DefaultEndpoint = "http://127.0.0.1:2379"

// EnvEndpoints names the environment variable read when --endpoints is not given.
const EnvEndpoints = "LATCH_ENDPOINTS"

// IO is where a command reads and writes, and how it sees the environment.
type IO struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// StdIO returns the process's standard streams and environment.
func StdIO() IO { return IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv} }

// Run executes latchctl with args (without the program name) and returns
// the exit code. ctx ending (an interrupt) stops long-running commands.
func Run(ctx context.Context, args []string, stdio IO) int {
	app := &app{io: stdio}
	root := app.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdio.Stdin)
	root.SetOut(stdio.Stdout)
	root.SetErr(stdio.Stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stdio.Stderr, "latchctl: %v\n", err)
	var usage usageError
	isUsage := errors.As(err, &usage) || !app.ran
	if isUsage {
		fmt.Fprintln(stdio.Stderr, "run 'latchctl help' for usage")
	}
	switch {
	case cmd != nil && cmd.Annotations[annotationRunsCommand] != "":
		return runnerExitCode(err)
	case isUsage:
		return ExitOther
	}
	return exitCode(err)
}

// runnerExitCode maps the error of 'lock' or 'elect' to their exit codes:
// the command's own, or one of 124-127.
func runnerExitCode(err error) int {
	var child *exitError
	if errors.As(err, &child) {
		return child.code
	}
	return ExitHoldFailed
}

// exitCode maps a command's error to latchctl's exit codes.
func exitCode(err error) int {
	var child *exitError
	if errors.As(err, &child) {
		return child.code
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrSessionLost) {
		return ExitUnavailable
	}
	switch api.CodeOf(err) {
	case api.CodeNotFound, api.CodeSessionExpired:
		return ExitNotFound
	case api.CodePreconditionFailed, api.CodeLockNotHeld:
		return ExitPrecondition
	case api.CodeUnavailable, api.CodeOverloaded:
		return ExitUnavailable
	case api.CodeUnauthenticated, api.CodePermissionDenied:
		return ExitDenied
	}
	return ExitOther
}

// usageError is a bad command line.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// app holds the global flags and the state shared by commands.
type app struct {
	io             IO
	endpoints      []string
	output         string
	dialTimeout    time.Duration
	commandTimeout time.Duration
	tlsFiles       client.TLSFiles // --cacert, --cert, --key
	tls            *tls.Config     // loaded from tlsFiles by checkGlobalFlags; nil without any
	token          string          // --token or LATCH_TOKEN
	// ran is set once a command's own code starts: errors before it are
	// cobra's usage errors.
	ran bool
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "latchctl",
		Short: "latchctl talks to a latch cluster: keys, watches, locks, elections, sessions, status, load generation",
		Long: "latchctl talks to a latch cluster: keys, watches, locks, elections, sessions, status,\n" +
			"membership and load generation. --endpoints (or " + EnvEndpoints + ") lists client URLs\n" +
			"of any members; default " + DefaultEndpoint + ".",
		Version:       buildinfo.Read("latchctl").String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			a.ran = true
			return a.checkGlobalFlags(cmd)
		},
	}
	flags := root.PersistentFlags()
	flags.StringSliceVar(&a.endpoints, "endpoints", nil,
		"comma-separated client URLs of the cluster (env "+EnvEndpoints+", default "+DefaultEndpoint+")")
	flags.StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	flags.DurationVar(&a.dialTimeout, "dial-timeout", 2*time.Second, "timeout to connect to a server")
	flags.DurationVar(&a.commandTimeout, "command-timeout", 10*time.Second, "timeout of a whole command (not bench or keepalive)")
	flags.StringVar(&a.tlsFiles.CAFile, "cacert", "", "PEM CA bundle that https endpoints' certificates must chain to (default: the system's roots)")
	flags.StringVar(&a.tlsFiles.CertFile, "cert", "", "PEM client certificate, for servers started with --client-cert-auth (with --key)")
	flags.StringVar(&a.tlsFiles.KeyFile, "key", "", "PEM private key of --cert")
	flags.StringVar(&a.token, "token", "", "bearer token from 'latchctl login' (env "+EnvToken+")")
	root.SetVersionTemplate("{{.Version}}\n")
	// The exit codes end the root's help (not every command's).
	root.SetUsageTemplate(root.UsageTemplate() + "{{if not .HasParent}}\n" + exitCodesHelp + "\n{{end}}")
	root.AddCommand(a.versionCommand(), a.getCommand(), a.putCommand(), a.rmCommand(), a.lsCommand(), a.txnCommand(),
		a.statusCommand(), a.membersCommand(), a.leaderCommand(), a.sessionCommand(), a.benchCommand(),
		a.watchCommand(), a.lockCommand(), a.electCommand(), a.lockStatusCommand(), a.electionStatusCommand(), a.sessionBenchCommand(), a.lockBenchCommand(),
		a.snapshotCommand(), a.checkCommand())
	root.AddCommand(a.authCommands()...)
	return root
}

func (a *app) checkGlobalFlags(cmd *cobra.Command) error {
	if a.output != "text" && a.output != "json" {
		return usagef("-o %q: want text or json", a.output)
	}
	if !cmd.Flags().Changed("endpoints") {
		if env := a.io.Getenv(EnvEndpoints); env != "" {
			a.endpoints = strings.Split(env, ",")
		} else {
			a.endpoints = []string{DefaultEndpoint}
		}
	}
	if !cmd.Flags().Changed("token") {
		a.token = a.io.Getenv(EnvToken)
	}
	if a.tlsFiles != (client.TLSFiles{}) {
		cfg, err := client.LoadTLS(a.tlsFiles)
		if err != nil {
			return usagef("--cacert, --cert, --key: %v", err)
		}
		a.tls = cfg
	}
	return nil
}

// connection is how every client of this run reaches the cluster.
func (a *app) connection() client.Config {
	return client.Config{Endpoints: a.endpoints, DialTimeout: a.dialTimeout, TLS: a.tls, Token: a.token}
}

// newClient returns a client of the chosen endpoints.
func (a *app) newClient() (*client.Client, error) {
	c, err := client.New(a.connection())
	if err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// commandContext bounds one short command by --command-timeout.
func (a *app) commandContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), a.commandTimeout)
}

// print writes v as JSON with -o json, or calls text otherwise.
func (a *app) print(v any, text func(w io.Writer)) error {
	if a.output == "json" {
		encoder := json.NewEncoder(a.io.Stdout)
		encoder.SetIndent("", "  ")
		return encoder.Encode(v)
	}
	text(a.io.Stdout)
	return nil
}

// printResult returns err when a call failed, and else prints its result
// as print does.
func (a *app) printResult(result any, err error, text func(w io.Writer)) error {
	if err != nil {
		return err
	}
	return a.print(result, text)
}

// withClient runs fn with a fresh client and a --command-timeout context.
func (a *app) withClient(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
	c, err := a.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := a.commandContext(cmd)
	defer cancel()
	return fn(ctx, c)
}
