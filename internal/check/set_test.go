package check

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
)

// TestSetCheckReportsLostParent runs the set workload's check against a
// member that lost every create under a parent, the parent too (acknowledged
// creates that were never made durable): the listing answers not_found, and
// the check must report each acknowledged create as lost (D), not give up.
func TestSetCheckReportsLostParent(t *testing.T) {
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: api.CodeNotFound, Message: "no such node"}})
	}))
	defer member.Close()
	report := Report{}
	r := NewRun(Options{Seed: 1, Target: Endpoints{member.URL}}, &report)
	w := &sequences{acked: map[string][]api.Node{
		"/seq/p0": {{Path: "/seq/p0/item-0000000001", CreatedIndex: 7}, {Path: "/seq/p0/item-0000000002", CreatedIndex: 9}},
	}}
	if err := w.Check(r); err != nil {
		t.Fatalf("check could not run: %v", err)
	}
	if report.Lost != 2 {
		t.Errorf("lost %d acknowledged creates, want 2; anomalies %q", report.Lost, report.Anomalies)
	}
	missing := 0
	for _, a := range report.Anomalies {
		if strings.HasPrefix(a, "D: acknowledged /seq/p0/item-") && strings.Contains(a, "missing on") {
			missing++
		}
	}
	if missing != 2 {
		t.Errorf("%d D anomalies naming a missing create, want 2: %q", missing, report.Anomalies)
	}
}
