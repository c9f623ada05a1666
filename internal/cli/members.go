package cli

// Cluster-operation commands (docs/operations.md shows them in use):
//
//	members [list]
//	    the member table: id, name, peer and client URLs, voter or learner.
//	members add NAME --peer-url HOST:PORT [--client-url URL] [--learner]
//	    adds a member; it always joins as a learner, and without --learner the
//	    leader promotes it to voter once it has caught up. Start the new latchd
//	    with --initial-cluster-state existing.
//	members remove NAME
//	    refused (exit 3) if the remaining healthy voters would lose quorum;
//	    removing the leader hands leadership over first. The removed latchd exits 0.
//	members promote NAME [--wait D]
//	    learner to voter; refused (exit 3) until it has caught up, unless
//	    --wait retries for up to D.
//	leader transfer TO
//	    moves leadership to the voter TO and waits until it leads.
//
// NAME and TO are member names or ids (0x...). Membership calls are decided
// by the leader; any endpoint will do, the client follows leader hints.
// Exit codes as for every command: 2 no such member, 3 refused
// (precondition), 4 no leader reachable or the outcome is unknown.

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
)

func (a *app) membersCommand() *cobra.Command {
	members := &cobra.Command{
		Use:   "members",
		Short: "list and change the cluster's members (list, add, remove, promote)",
		Long:  "members alone lists the members, as 'members list' does.",
		Args:  cobra.NoArgs,
	}
	a.listMembersFlags(members)
	list := &cobra.Command{
		Use:   "list",
		Short: "list the cluster's members",
		Args:  cobra.NoArgs,
	}
	a.listMembersFlags(list)
	members.AddCommand(list, a.addMemberCommand(), a.removeMemberCommand(), a.promoteMemberCommand())
	return members
}

// listMembersFlags makes cmd list the members, with its own --consistency:
// linearizable by default; stale answers from the endpoint's own state, as
// a member cut off from the leader still can.
func (a *app) listMembersFlags(cmd *cobra.Command) {
	var consistency string
	cmd.Flags().StringVar(&consistency, "consistency", api.Linearizable, "linearizable or stale")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		opts, err := readOptions(consistency)
		if err != nil {
			return err
		}
		return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
			members, err := c.Members(ctx, opts...)
			return a.printResult(members, err, func(w io.Writer) { printMembers(w, members.Members) })
		})
	}
}

func printMembers(w io.Writer, members []api.Member) {
	table := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "ID\tNAME\tPEER URL\tCLIENT URL\tROLE")
	for _, m := range members {
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Name, m.PeerURL, m.ClientURL, memberRole(m))
	}
	_ = table.Flush()
}

func memberRole(m api.Member) string {
	if m.Learner {
		return "learner"
	}
	return "voter"
}

func (a *app) addMemberCommand() *cobra.Command {
	var req client.AddMemberRequest
	cmd := &cobra.Command{
		Use:   "add NAME --peer-url HOST:PORT [--client-url URL] [--learner]",
		Short: "add a member (as a learner; promoted once caught up unless --learner)",
		Long: "add records the member in the cluster; then start its latchd with --initial-cluster-state existing,\n" +
			"--name NAME and an --initial-cluster listing the existing members and itself.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			if req.PeerURL == "" {
				return usagef("members add: --peer-url is required")
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				added, err := c.AddMember(ctx, req)
				return a.printResult(added, err, func(w io.Writer) {
					then := "promoted to voter by the leader once caught up"
					if req.Learner {
						then = "stays a learner until 'latchctl members promote " + added.Name + "'"
					}
					fmt.Fprintf(w, "added %s (%s) as a learner; %s\n", added.Name, added.ID, then)
					fmt.Fprintf(w, "start it with: latchd --name %s --listen-peer %s --initial-cluster-state existing ...\n", added.Name, added.PeerURL)
				})
			})
		},
	}
	cmd.Flags().StringVar(&req.PeerURL, "peer-url", "", "host:port where the new member's peer transport listens (required)")
	cmd.Flags().StringVar(&req.ClientURL, "client-url", "", "http://host:port of the new member's client API")
	cmd.Flags().BoolVar(&req.Learner, "learner", false, "keep it a non-voting learner (observer)")
	return cmd
}

func (a *app) removeMemberCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "remove a member (refused if quorum would be lost; the leader hands over first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.RemoveMember(ctx, args[0]); err != nil {
					return err
				}
				return a.print(map[string]any{"removed": args[0]}, func(w io.Writer) {
					fmt.Fprintf(w, "removed %s; its latchd stops by itself\n", args[0])
				})
			})
		},
	}
}

func (a *app) promoteMemberCommand() *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "promote NAME [--wait D]",
		Short: "make a caught-up learner a voter",
		Long:  "promote is refused (exit 3) while the learner is behind; --wait D retries until it has caught up or D passes.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), max(a.commandTimeout, wait))
			defer cancel()
			promoted, err := promote(ctx, c, args[0], wait)
			return a.printResult(promoted, err, func(w io.Writer) {
				fmt.Fprintf(w, "promoted %s (%s) to voter\n", promoted.Name, promoted.ID)
			})
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "retry for up to this long while the learner catches up (the command may then outlast --command-timeout)")
	return cmd
}

// promote promotes name once, or with wait > 0 retries while it is behind
// until ctx ends.
func promote(ctx context.Context, c *client.Client, name string, wait time.Duration) (*api.Member, error) {
	if wait <= 0 {
		return c.PromoteMember(ctx, name)
	}
	return c.WaitPromoteMember(ctx, name)
}

func (a *app) leaderCommand() *cobra.Command {
	leader := &cobra.Command{
		Use:   "leader",
		Short: "leadership of the cluster (transfer)",
	}
	leader.AddCommand(&cobra.Command{
		Use:   "transfer TO",
		Short: "move leadership to the voter TO and wait until it leads",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				status, err := c.TransferLeader(ctx, args[0])
				return a.printResult(status, err, func(w io.Writer) {
					fmt.Fprintf(w, "leader is now %s (term %d)\n", args[0], status.Term)
				})
			})
		},
	})
	return leader
}
