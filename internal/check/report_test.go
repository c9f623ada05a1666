package check

import (
	"reflect"
	"testing"
)

// TestReportMerge fills every field of a Report by reflection, so a field
// added to Report and forgotten in Merge fails it: counters add up, Faults
// add per kind, Anomalies append, and Seed (the first run's) is kept.
func TestReportMerge(t *testing.T) {
	run := Report{Faults: map[string]int{"kill-one": 1}, Anomalies: []string{"first"}}
	fields := reflect.ValueOf(&run).Elem()
	for i := range fields.NumField() {
		f := fields.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64, reflect.Uint64:
			if f.CanInt() {
				f.SetInt(int64(i + 1))
			} else {
				f.SetUint(uint64(i + 1))
			}
		case reflect.Map, reflect.Slice:
			// set above
		default:
			t.Fatalf("Report.%s is a %s: teach Merge and this test how to merge it", fields.Type().Field(i).Name, f.Kind())
		}
	}
	total := Report{Seed: 7}
	total.Merge(run)
	total.Merge(run)
	merged := reflect.ValueOf(total)
	for i := range merged.NumField() {
		name := fields.Type().Field(i).Name
		f := merged.Field(i)
		switch {
		case name == "Seed":
			if total.Seed != 7 {
				t.Errorf("Merge changed Seed to %d", total.Seed)
			}
		case f.CanInt() && f.Int() != 2*int64(i+1), f.CanUint() && f.Uint() != 2*uint64(i+1):
			t.Errorf("merged Report.%s = %v, want %d: Merge forgets it", name, f, 2*(i+1))
		}
	}
	if total.Faults["kill-one"] != 2 {
		t.Errorf("merged Faults %v, want kill-one: 2", total.Faults)
	}
	if !reflect.DeepEqual(total.Anomalies, []string{"first", "first"}) {
		t.Errorf("merged Anomalies %q, want both runs'", total.Anomalies)
	}
}
