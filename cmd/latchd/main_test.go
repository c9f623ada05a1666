package main

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// TestUsageHidesUnsafeFlags checks that the usage text lists the ordinary
// flags with their defaults (not the values parsed before an error) and
// leaves out the test-only "unsafe-" ones.
func TestUsageHidesUnsafeFlags(t *testing.T) {
	fs := flag.NewFlagSet("latchd", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	fs.Duration("tick", 100*time.Millisecond, "raft tick interval")
	fs.Bool("unsafe-no-sync", false, "TEST ONLY")
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse([]string{"--tick", "5ms", "--bogus"}); err == nil {
		t.Fatal("parse of an unknown flag succeeded")
	}
	text := out.String()
	if !strings.Contains(text, "Usage of latchd:") || !strings.Contains(text, "-tick duration\n    \traft tick interval (default 100ms)") {
		t.Errorf("usage lacks --tick and its default:\n%s", text)
	}
	if strings.Contains(text, "unsafe") {
		t.Errorf("usage shows a test-only flag:\n%s", text)
	}
}
