package zkserver

import (
	"slices"
	"testing"

	"github.com/latch-io/latch/internal/server"
)

// TestTxnPlanIndexes checks zkOf and primaryOf against the lists a plan
// would hold if it made them on every add.
func TestTxnPlanIndexes(t *testing.T) {
	op := func(n int) ([]server.TxnOp, []opRole) {
		return make([]server.TxnOp, n), make([]opRole, n)
	}
	for _, sizes := range [][]int{{1}, {2}, {0}, {1, 1}, {2, 1, 2}, {0, 2}, {2, 0, 1}, {1, 0}} {
		var plan txnPlan
		var zkIndex, primary []int
		for zk, n := range sizes {
			ops, roles := op(n)
			plan.add(zk, ops, roles)
			for range n {
				zkIndex = append(zkIndex, zk)
			}
			primary = append(primary, len(zkIndex)-1)
		}
		if len(plan.ops) != len(zkIndex) || len(plan.roles) != len(zkIndex) {
			t.Fatalf("sizes %v: %d operations, %d roles, want %d", sizes, len(plan.ops), len(plan.roles), len(zkIndex))
		}
		var gotZK, gotPrimary []int
		for i := range plan.ops {
			gotZK = append(gotZK, plan.zkOf(i))
		}
		for zk := range sizes {
			gotPrimary = append(gotPrimary, plan.primaryOf(zk))
		}
		if !slices.Equal(gotZK, zkIndex) || !slices.Equal(gotPrimary, primary) {
			t.Errorf("sizes %v: zkOf %v primaryOf %v, want %v and %v", sizes, gotZK, gotPrimary, zkIndex, primary)
		}
	}
}
