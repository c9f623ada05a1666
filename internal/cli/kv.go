package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
)

func (a *app) getCommand() *cobra.Command {
	var consistency string
	cmd := &cobra.Command{
		Use:   "get PATH",
		Short: "print the value of a node (-o json: the whole node)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := readOptions(consistency)
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				node, err := c.Get(ctx, args[0], opts...)
				return a.printResult(node, err, func(w io.Writer) { fmt.Fprintln(w, node.Value) })
			})
		},
	}
	cmd.Flags().StringVar(&consistency, "consistency", api.Linearizable, "linearizable or stale")
	return cmd
}

func (a *app) lsCommand() *cobra.Command {
	var consistency string
	cmd := &cobra.Command{
		Use:   "ls [PATH]",
		Short: "list the children of a node (default /), one name a line",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := readOptions(consistency)
			if err != nil {
				return err
			}
			path := "/"
			if len(args) == 1 {
				path = args[0]
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				children, err := c.Children(ctx, path, opts...)
				return a.printResult(children, err, func(w io.Writer) {
					for _, name := range children.Children {
						fmt.Fprintln(w, name)
					}
				})
			})
		},
	}
	cmd.Flags().StringVar(&consistency, "consistency", api.Linearizable, "linearizable or stale")
	return cmd
}

func readOptions(consistency string) ([]client.ReadOption, error) {
	switch consistency {
	case api.Linearizable:
		return nil, nil
	case api.Stale:
		return []client.ReadOption{client.Stale()}, nil
	}
	return nil, usagef("--consistency %q: want linearizable or stale", consistency)
}

func (a *app) putCommand() *cobra.Command {
	var prev, sessionID string
	var ephemeral, sequential bool
	cmd := &cobra.Command{
		Use:   "put PATH [VALUE]",
		Short: "write a node (VALUE omitted: read it from stdin); prints the path written",
		Long: "put writes VALUE at PATH, creating missing parents. --ephemeral ties the node to the\n" +
			"session given with --session (keep it alive with 'latchctl session keepalive').",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := prevOption(prev)
			if err != nil {
				return err
			}
			value, err := a.valueArg(args)
			if err != nil {
				return err
			}
			if ephemeral {
				if sessionID == "" {
					return usagef("--ephemeral needs --session ID (make one with 'latchctl session create --keepalive')")
				}
				opts = append(opts, client.Ephemeral())
			}
			if sequential {
				opts = append(opts, client.Sequential())
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if sessionID != "" {
					s, err := c.ResumeSession(ctx, sessionID)
					if err != nil {
						return err
					}
					defer s.Orphan() // the session belongs to someone else: leave it open
					opts = append(opts, client.WithSession(s))
				}
				node, err := c.Put(ctx, args[0], value, opts...)
				return a.printResult(node, err, func(w io.Writer) { fmt.Fprintf(w, "%s version %d\n", node.Path, node.Version) })
			})
		},
	}
	cmd.Flags().StringVar(&prev, "prev-version", "any", "write only if the node is at this version: N, any, or none (must not exist)")
	cmd.Flags().BoolVar(&ephemeral, "ephemeral", false, "delete the node when the --session ends")
	cmd.Flags().BoolVar(&sequential, "sequential", false, "append a 10-digit per-parent counter to the name")
	cmd.Flags().StringVar(&sessionID, "session", "", "session id the write belongs to")
	return cmd
}

func (a *app) valueArg(args []string) (string, error) {
	if len(args) == 2 {
		return args[1], nil
	}
	raw, err := io.ReadAll(a.io.Stdin)
	if err != nil {
		return "", fmt.Errorf("read value from stdin: %w", err)
	}
	return string(raw), nil
}

// prevOption parses --prev-version.
func prevOption(prev string) ([]client.WriteOption, error) {
	switch prev {
	case "", "any":
		return nil, nil
	case "none":
		return []client.WriteOption{client.PrevNone()}, nil
	}
	version, err := strconv.ParseUint(prev, 10, 64)
	if err != nil {
		return nil, usagef("--prev-version %q: want a version number, any or none", prev)
	}
	return []client.WriteOption{client.PrevVersion(version)}, nil
}

func (a *app) rmCommand() *cobra.Command {
	var prev string
	var recursive bool
	cmd := &cobra.Command{
		Use:   "rm PATH",
		Short: "delete a node (-r: with its subtree)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := prevOption(prev)
			if err != nil {
				return err
			}
			if prev == "none" {
				return usagef("--prev-version none makes no sense for rm")
			}
			if recursive {
				opts = append(opts, client.Recursive())
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				deleted, err := c.Delete(ctx, args[0], opts...)
				return a.printResult(deleted, err, func(w io.Writer) { fmt.Fprintf(w, "deleted %s\n", args[0]) })
			})
		},
	}
	cmd.Flags().StringVar(&prev, "prev-version", "any", "delete only if the node is at this version")
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "delete the whole subtree")
	return cmd
}
