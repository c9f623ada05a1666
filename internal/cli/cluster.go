package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
)

// endpointStatus is one row of 'latchctl status'.
type endpointStatus struct {
	Endpoint string      `json:"endpoint"`
	Status   *api.Status `json:"status,omitempty"`
	// LeaderName is the name of the member Status.LeaderID names, when
	// Status lists it among its members.
	LeaderName string `json:"leader_name,omitempty"`
	Error      string `json:"error,omitempty"`
}

func (a *app) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "show every endpoint's role, term, leader and indexes",
		Long: "status asks each endpoint for GET /v1/status; it fails (exit 4) only if none answers.\n" +
			"LEADER is the leader's member name and LEADER URL its client URL, as that endpoint sees\n" +
			"them ('-' while it knows no leader); -o json adds leader_name beside each raw status.\n" +
			"With more than one shard, a second table shows each endpoint's view of every shard: its\n" +
			"role there, the shard's leader, term, commit and applied index.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				rows, err := collectStatus(ctx, c, a.endpoints)
				if printErr := a.print(rows, func(w io.Writer) { printStatus(w, rows) }); printErr != nil {
					return printErr
				}
				return err
			})
		},
	}
}

// collectStatus asks each endpoint in turn; the error is set when none answered.
func collectStatus(ctx context.Context, c *client.Client, endpoints []string) ([]endpointStatus, error) {
	var rows []endpointStatus
	var lastErr error
	answered := 0
	for _, endpoint := range endpoints {
		status, err := c.StatusOf(ctx, endpoint)
		row := endpointStatus{Endpoint: endpoint, Status: status}
		if err != nil {
			row.Error, lastErr = err.Error(), err
		} else {
			row.LeaderName = leaderName(status)
			answered++
		}
		rows = append(rows, row)
	}
	if answered == 0 {
		return rows, fmt.Errorf("no endpoint answered: %w", lastErr)
	}
	return rows, nil
}

// leaderName returns the name of the leader s reports, its id if s does
// not list that member, or "" if s knows no leader.
func leaderName(s *api.Status) string { return memberName(s, s.LeaderID) }

func printStatus(w io.Writer, rows []endpointStatus) {
	table := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "ENDPOINT\tNAME\tROLE\tTERM\tLEADER\tLEADER URL\tCOMMIT\tAPPLIED\tERROR")
	for _, row := range rows {
		s := row.Status
		if s == nil {
			fmt.Fprintf(table, "%s\t-\t-\t-\t-\t-\t-\t-\t%s\n", row.Endpoint, row.Error)
			continue
		}
		fmt.Fprintf(table, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t\n", row.Endpoint, s.Name, s.Role, s.Term,
			orDash(row.LeaderName), orDash(s.LeaderClient), s.CommitIndex, s.AppliedIndex)
	}
	_ = table.Flush()
	if sharded(rows) {
		fmt.Fprintln(w)
		printShards(w, rows)
	}
}

// sharded reports whether an endpoint runs more than one shard: only then
// does status print the per-shard table (with one shard it repeats the
// first).
func sharded(rows []endpointStatus) bool {
	for _, row := range rows {
		if row.Status != nil && len(row.Status.Shards) > 1 {
			return true
		}
	}
	return false
}

// printShards prints each endpoint's view of every shard: its role there,
// the shard's leader (by member name), term and indexes.
func printShards(w io.Writer, rows []endpointStatus) {
	table := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "ENDPOINT\tSHARD\tROLE\tLEADER\tTERM\tCOMMIT\tAPPLIED")
	for _, row := range rows {
		if row.Status == nil {
			continue
		}
		for _, sh := range row.Status.Shards {
			fmt.Fprintf(table, "%s\t%d\t%s\t%s\t%d\t%d\t%d\n", row.Endpoint, sh.Shard, sh.Role,
				orDash(memberName(row.Status, sh.LeaderID)), sh.Term, sh.CommitIndex, sh.AppliedIndex)
		}
	}
	_ = table.Flush()
}

// memberName returns the name s lists for member id, else id itself.
func memberName(s *api.Status, id string) string {
	for _, m := range s.Members {
		if m.ID == id && m.Name != "" {
			return m.Name
		}
	}
	return id
}

// orDash shows an unknown value as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
