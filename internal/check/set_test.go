package check

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
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

// TestSetCheckReportsReusedName: a cluster that forgot an acknowledged
// create and handed its name out again lists the name on every member, and
// the node there is the later one. The check must report the earlier create
// as lost (D), once, even where checkIdentity's sample does not read it; and
// a name acknowledged twice at the same index (a log that forgot the index
// and filled it again) is a loss too.
func TestSetCheckReportsReusedName(t *testing.T) {
	const count = 3 * identitySample // checkIdentity reads every third acknowledgement
	children := map[string][]string{}
	created := map[string]uint64{} // path -> the created index of the node the cluster holds
	var p0 []api.Node
	for i := 1; i <= count; i++ {
		name := fmt.Sprintf("item-%010d", i)
		p0 = append(p0, api.Node{Path: "/seq/p0/" + name, CreatedIndex: uint64(i)})
		children["/seq/p0"] = append(children["/seq/p0"], name)
		created["/seq/p0/"+name] = uint64(i)
	}
	// The create of item-2 (index 2, second in the list: outside the
	// sample) was lost; its name went to a later create at index 400.
	p0 = append(p0, api.Node{Path: "/seq/p0/item-0000000002", CreatedIndex: 400})
	created["/seq/p0/item-0000000002"] = 400
	p1 := []api.Node{{Path: "/seq/p1/item-0000000001", CreatedIndex: 3}, {Path: "/seq/p1/item-0000000001", CreatedIndex: 3}}
	children["/seq/p1"] = []string{"item-0000000001"}
	created["/seq/p1/item-0000000001"] = 3
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		path := strings.TrimPrefix(req.URL.Path, "/v1/kv")
		if req.URL.Query().Get("children") == "true" {
			_ = json.NewEncoder(w).Encode(api.Children{Path: path, Children: children[path], Index: 500})
			return
		}
		_ = json.NewEncoder(w).Encode(api.Node{Path: path, CreatedIndex: created[path]})
	}))
	defer member.Close()
	report := Report{}
	r := NewRun(Options{Seed: 1, Target: Endpoints{member.URL}}, &report)
	w := &sequences{acked: map[string][]api.Node{"/seq/p0": p0, "/seq/p1": p1}}
	if err := w.Check(r); err != nil {
		t.Fatalf("check could not run: %v", err)
	}
	var lost []string
	for _, a := range report.Anomalies {
		if strings.HasPrefix(a, "D:") {
			lost = append(lost, a)
		}
	}
	slices.Sort(lost)
	want := []string{
		"D: acknowledged /seq/p0/item-0000000002 (index 2) lost: its name was acknowledged again, for a create at index 400",
		"D: acknowledged /seq/p1/item-0000000001 (index 3) lost: another create was acknowledged as the same node (the log forgot the index and filled it again)",
	}
	if !slices.Equal(lost, want) {
		t.Errorf("D anomalies %q, want %q", lost, want)
	}
	if report.Lost != 2 {
		t.Errorf("lost %d acknowledged creates, want 2", report.Lost)
	}
}
