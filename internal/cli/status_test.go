package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
)

// TestStatusPrintsShardTable checks 'latchctl status' output: with one
// shard, the endpoint table alone; with two, a per-shard table follows
// with each endpoint's role, the shard's leader by name, term and indexes.
func TestStatusPrintsShardTable(t *testing.T) {
	members := []api.Member{{ID: "0x1", Name: "n1"}, {ID: "0x2", Name: "n2"}}
	one := &api.Status{Name: "n1", Role: "leader", LeaderID: "0x1", Members: members,
		Shards: []api.ShardStatus{{Shard: 0, Role: "leader", LeaderID: "0x1", Term: 2, CommitIndex: 9, AppliedIndex: 9}}}
	var out bytes.Buffer
	printStatus(&out, []endpointStatus{{Endpoint: "http://a", Status: one, LeaderName: "n1"}})
	if strings.Contains(out.String(), "SHARD") {
		t.Fatalf("one shard printed a shard table:\n%s", out.String())
	}
	two := *one
	two.Shards = append(two.Shards, api.ShardStatus{Shard: 1, Role: "follower", LeaderID: "0x2", Term: 3, CommitIndex: 7, AppliedIndex: 6})
	out.Reset()
	printStatus(&out, []endpointStatus{{Endpoint: "http://a", Status: &two, LeaderName: "n1"}, {Endpoint: "http://b", Error: "refused"}})
	text := out.String()
	_, shardTable, found := strings.Cut(text, "\n\n")
	if !found {
		t.Fatalf("no shard table after the endpoint table:\n%s", text)
	}
	lines := strings.Split(strings.TrimSpace(shardTable), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ENDPOINT") || !strings.Contains(lines[0], "SHARD") {
		t.Fatalf("shard table:\n%s", shardTable)
	}
	want := [][]string{
		{"http://a", "0", "leader", "n1", "2", "9", "9"},
		{"http://a", "1", "follower", "n2", "3", "7", "6"},
	}
	for i, fields := range want {
		if got := strings.Fields(lines[i+1]); strings.Join(got, " ") != strings.Join(fields, " ") {
			t.Errorf("shard row %d = %q, want %q", i, got, fields)
		}
	}
}
