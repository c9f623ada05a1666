package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
)

// EnvToken names the environment variable read when --token is not given.
const EnvToken = "LATCH_TOKEN"

// authCommands are 'auth', 'user', 'role' and 'login'.
func (a *app) authCommands() []*cobra.Command {
	return []*cobra.Command{a.authCommand(), a.userCommand(), a.roleCommand(), a.quotaCommand(), a.loginCommand()}
}

// change returns a RunE that sends the auth change build makes of the args.
func (a *app) change(build func(args []string) (api.AuthChange, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		change, err := build(args)
		if err != nil {
			return err
		}
		return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
			out, err := c.ChangeAuth(ctx, change)
			return a.printResult(out, err, func(w io.Writer) { fmt.Fprintf(w, "OK (index %d)\n", out.Index) })
		})
	}
}

func fixed(action string, fields func(args []string) api.AuthChange) func([]string) (api.AuthChange, error) {
	return func(args []string) (api.AuthChange, error) {
		change := fields(args)
		change.Action = action
		return change, nil
	}
}

func (a *app) authCommand() *cobra.Command {
	auth := &cobra.Command{Use: "auth", Short: "turn authentication on or off, or show it (enable, disable, status)"}
	none := func([]string) api.AuthChange { return api.AuthChange{} }
	auth.AddCommand(
		&cobra.Command{Use: "enable", Short: "enable authentication (the user root must exist)", Args: cobra.NoArgs, RunE: a.change(fixed("enable", none))},
		&cobra.Command{Use: "disable", Short: "disable authentication (root only, once enabled)", Args: cobra.NoArgs, RunE: a.change(fixed("disable", none))},
		&cobra.Command{Use: "status", Short: "show whether auth is enabled, the users and the roles", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					st, err := c.AuthStatus(ctx)
					return a.printResult(st, err, func(w io.Writer) { printAuthStatus(w, st) })
				})
			}},
	)
	return auth
}

func printAuthStatus(w io.Writer, st api.AuthStatus) {
	fmt.Fprintf(w, "auth enabled: %v\n", st.Enabled)
	table := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "USER\tROLES\tPASSWORD")
	for _, u := range st.Users {
		fmt.Fprintf(table, "%s\t%s\t%v\n", u.Name, strings.Join(u.Roles, ","), u.HasPassword)
	}
	fmt.Fprintln(table, "ROLE\tGRANTS\t")
	for _, r := range st.Roles {
		grants := make([]string, 0, len(r.Grants))
		for _, g := range r.Grants {
			grants = append(grants, g.Perm+":"+g.Prefix)
		}
		fmt.Fprintf(table, "%s\t%s\t\n", r.Name, strings.Join(grants, " "))
	}
	table.Flush()
	if len(st.Quotas) == 0 {
		return
	}
	table = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "QUOTA\tNODES\tBYTES\tSHARDS (used/allotted nodes, bytes)")
	for _, q := range st.Quotas {
		fmt.Fprintf(table, "%s\t%d/%s\t%d/%s\t%s\n", q.Prefix, q.Nodes, limitText(q.MaxNodes), q.Bytes, limitText(q.MaxBytes), shardParts(q))
	}
	table.Flush()
}

// shardParts shows each shard's usage and allotment of a quota, "-" with
// one shard.
func shardParts(q api.AuthQuota) string {
	if len(q.Shards) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(q.Shards))
	for _, s := range q.Shards {
		part := fmt.Sprintf("%d:", s.Shard)
		if q.MaxNodes > 0 {
			part += fmt.Sprintf("%d/%d", s.Nodes, s.AllotNodes)
		}
		if q.MaxBytes > 0 {
			if q.MaxNodes > 0 {
				part += ","
			}
			part += fmt.Sprintf("%d/%dB", s.Bytes, s.AllotBytes)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, " ")
}

// limitText shows a quota's limit, "-" for none.
func limitText(limit uint64) string {
	if limit == 0 {
		return "-"
	}
	return fmt.Sprint(limit)
}

// password returns --password, or the first line of stdin without it.
func (a *app) password(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	line, err := bufio.NewReader(a.io.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return "", usagef("a password is required: --password or a line on stdin")
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func (a *app) userCommand() *cobra.Command {
	user := &cobra.Command{Use: "user", Short: "users (add, delete, passwd, grant, revoke, list)"}
	var password string
	var noPassword bool
	add := &cobra.Command{Use: "add NAME", Short: "add a user (password from --password or stdin; --no-password for a certificate-only user)", Args: cobra.ExactArgs(1),
		RunE: a.change(func(args []string) (api.AuthChange, error) {
			change := api.AuthChange{Action: "user_add", User: args[0]}
			if noPassword {
				return change, nil
			}
			p, err := a.password(password)
			change.Password = p
			return change, err
		})}
	add.Flags().StringVar(&password, "password", "", "the password (default: read a line from stdin)")
	add.Flags().BoolVar(&noPassword, "no-password", false, "no password login: the user authenticates by client certificate")
	passwd := &cobra.Command{Use: "passwd NAME", Short: "set a user's password (revokes its tokens)", Args: cobra.ExactArgs(1),
		RunE: a.change(func(args []string) (api.AuthChange, error) {
			p, err := a.password(password)
			return api.AuthChange{Action: "user_passwd", User: args[0], Password: p}, err
		})}
	passwd.Flags().StringVar(&password, "password", "", "the new password (default: read a line from stdin)")
	user.AddCommand(add, passwd,
		&cobra.Command{Use: "delete NAME", Short: "delete a user and its tokens", Args: cobra.ExactArgs(1),
			RunE: a.change(fixed("user_delete", func(args []string) api.AuthChange { return api.AuthChange{User: args[0]} }))},
		&cobra.Command{Use: "grant NAME ROLE", Short: "give a user a role", Args: cobra.ExactArgs(2),
			RunE: a.change(fixed("user_grant", func(args []string) api.AuthChange { return api.AuthChange{User: args[0], Role: args[1]} }))},
		&cobra.Command{Use: "revoke NAME ROLE", Short: "take a role from a user", Args: cobra.ExactArgs(2),
			RunE: a.change(fixed("user_revoke", func(args []string) api.AuthChange { return api.AuthChange{User: args[0], Role: args[1]} }))},
		&cobra.Command{Use: "list", Short: "list the users and their roles", Args: cobra.NoArgs, RunE: a.listAuth},
	)
	return user
}

func (a *app) roleCommand() *cobra.Command {
	role := &cobra.Command{Use: "role", Short: "roles (add, delete, grant, revoke, list)"}
	role.AddCommand(
		&cobra.Command{Use: "add NAME", Short: "add a role with no grant", Args: cobra.ExactArgs(1),
			RunE: a.change(fixed("role_add", func(args []string) api.AuthChange { return api.AuthChange{Role: args[0]} }))},
		&cobra.Command{Use: "delete NAME", Short: "delete a role (and take it from every user)", Args: cobra.ExactArgs(1),
			RunE: a.change(fixed("role_delete", func(args []string) api.AuthChange { return api.AuthChange{Role: args[0]} }))},
		&cobra.Command{Use: "grant NAME read|write|admin PREFIX", Short: "grant a permission on a path prefix and below", Args: cobra.ExactArgs(3),
			RunE: a.change(fixed("role_grant", func(args []string) api.AuthChange {
				return api.AuthChange{Role: args[0], Perm: args[1], Prefix: args[2]}
			}))},
		&cobra.Command{Use: "revoke NAME read|write|admin PREFIX", Short: "remove a grant", Args: cobra.ExactArgs(3),
			RunE: a.change(fixed("role_revoke", func(args []string) api.AuthChange {
				return api.AuthChange{Role: args[0], Perm: args[1], Prefix: args[2]}
			}))},
		&cobra.Command{Use: "list", Short: "list the roles and their grants", Args: cobra.NoArgs, RunE: a.listAuth},
	)
	return role
}

func (a *app) quotaCommand() *cobra.Command {
	quota := &cobra.Command{Use: "quota", Short: "quotas on the nodes and bytes under a prefix (set, clear, list)"}
	var maxNodes, maxBytes uint64
	set := &cobra.Command{Use: "set PREFIX", Short: "set the quota on a prefix (--max-nodes, --max-bytes; 0: no limit)", Args: cobra.ExactArgs(1),
		RunE: a.change(fixed("quota_set", func(args []string) api.AuthChange {
			return api.AuthChange{Prefix: args[0], MaxNodes: maxNodes, MaxBytes: maxBytes}
		}))}
	set.Flags().Uint64Var(&maxNodes, "max-nodes", 0, "nodes at and below the prefix")
	set.Flags().Uint64Var(&maxBytes, "max-bytes", 0, "bytes of the values at and below the prefix")
	quota.AddCommand(set,
		&cobra.Command{Use: "clear PREFIX", Short: "remove the quota on a prefix", Args: cobra.ExactArgs(1),
			RunE: a.change(fixed("quota_clear", func(args []string) api.AuthChange { return api.AuthChange{Prefix: args[0]} }))},
		&cobra.Command{Use: "list", Short: "list the quotas and what they hold now", Args: cobra.NoArgs, RunE: a.listAuth},
	)
	return quota
}

func (a *app) listAuth(cmd *cobra.Command, _ []string) error {
	return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
		st, err := c.AuthStatus(ctx)
		return a.printResult(st, err, func(w io.Writer) { printAuthStatus(w, st) })
	})
}

func (a *app) loginCommand() *cobra.Command {
	var password string
	login := &cobra.Command{Use: "login USER", Short: "log in and print a token (export it as " + EnvToken + ")", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.password(password)
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				out, err := c.Login(ctx, args[0], p)
				return a.printResult(out, err, func(w io.Writer) { fmt.Fprintln(w, out.Token) })
			})
		}}
	login.Flags().StringVar(&password, "password", "", "the password (default: read a line from stdin)")
	return login
}
