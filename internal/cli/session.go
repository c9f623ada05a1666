package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/client"
)

func (a *app) sessionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "create, inspect, keep alive and close sessions",
	}
	cmd.AddCommand(a.sessionCreateCommand(), a.sessionGetCommand(), a.sessionKeepaliveCommand(), a.sessionCloseCommand())
	return cmd
}

func (a *app) sessionCreateCommand() *cobra.Command {
	var timeout time.Duration
	var keepalive bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "create a session and print its id",
		Long: "create makes a session and prints its id. Without --keepalive the session lives only\n" +
			"until its timeout unless something (such as 'latchctl session keepalive ID') heartbeats it.\n" +
			"The id is a secret: whoever knows it can act as the session. Reads of locks, elections\n" +
			"and ephemeral nodes name a session by its handle instead (-o json shows session_handle).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := a.commandContext(cmd)
			s, err := c.NewSession(ctx, timeout)
			cancel()
			if err != nil {
				return err
			}
			info := map[string]any{"session_id": s.ID(), "session_handle": s.Handle(), "timeout_ms": s.Timeout().Milliseconds()}
			if err := a.print(info, func(w io.Writer) { fmt.Fprintln(w, s.ID()) }); err != nil {
				s.Orphan()
				return err
			}
			if !keepalive {
				s.Orphan()
				return nil
			}
			return a.keepAlive(cmd.Context(), s)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "session timeout (the server clamps it)")
	cmd.Flags().BoolVar(&keepalive, "keepalive", false, "keep the session alive until interrupted, then close it")
	return cmd
}

func (a *app) sessionGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "show a session's timeout and ephemeral node count",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.SessionInfo(ctx, args[0])
				return a.printResult(info, err, func(w io.Writer) {
					fmt.Fprintf(w, "session %s (handle %s): timeout %v, %d ephemeral nodes\n",
						info.SessionID, info.SessionHandle, time.Duration(info.TimeoutMs)*time.Millisecond, info.EphemeralCount)
				})
			})
		},
	}
}

func (a *app) sessionKeepaliveCommand() *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "keepalive ID",
		Short: "heartbeat a session every timeout/3 until interrupted (--once: one heartbeat)",
		Long: "keepalive heartbeats session ID through any reachable endpoint until interrupted, and\n" +
			"leaves the session open on exit. It fails with exit code 2 when the session is gone.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			if once {
				ctx, cancel := a.commandContext(cmd)
				defer cancel()
				beat, err := c.Heartbeat(ctx, args[0])
				return a.printResult(beat, err, func(w io.Writer) { fmt.Fprintf(w, "session %s alive\n", args[0]) })
			}
			ctx, cancel := a.commandContext(cmd)
			s, err := c.ResumeSession(ctx, args[0])
			cancel()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.io.Stderr, "keeping session %s alive every %v; interrupt to stop\n", s.ID(), s.Timeout()/3)
			err = a.waitSession(cmd.Context(), s)
			s.Orphan()
			return err
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "send one heartbeat and exit")
	return cmd
}

func (a *app) sessionCloseCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "close ID",
		Short: "close a session: its ephemeral nodes are deleted, its locks released, its candidacies withdrawn",
		Long: "close ends session ID at once, as its timeout passing would: the server deletes its\n" +
			"ephemeral nodes, releases its locks and withdraws its candidacies. A process still using\n" +
			"the session finds it gone. It fails with exit code 2 when the session does not exist\n" +
			"(never did, already closed, or expired).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				s, err := c.ResumeSession(ctx, args[0])
				if err != nil {
					return err
				}
				if err := s.Close(ctx); err != nil {
					return err
				}
				return a.print(map[string]any{"session_id": s.ID(), "closed": true},
					func(w io.Writer) { fmt.Fprintf(w, "closed session %s\n", s.ID()) })
			})
		},
	}
}

// keepAlive keeps s alive until ctx ends, then closes it.
func (a *app) keepAlive(ctx context.Context, s *client.Session) error {
	err := a.waitSession(ctx, s)
	closeCtx, cancel := context.WithTimeout(context.Background(), a.commandTimeout)
	defer cancel()
	if closeErr := s.Close(closeCtx); err == nil {
		err = closeErr
	}
	return err
}

// waitSession blocks until ctx ends (nil) or the session ends (its reason).
func (a *app) waitSession(ctx context.Context, s *client.Session) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.Done():
		return s.Err()
	}
}
