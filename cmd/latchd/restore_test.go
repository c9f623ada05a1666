package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestoreRefusesBadCommandLines: 'latchd restore' reports a bad command
// line as a usage error naming what is wrong, before reading anything.
func TestRestoreRefusesBadCommandLines(t *testing.T) {
	dir := t.TempDir()
	ok := []string{"--name", "n1", "--data-dir", filepath.Join(dir, "d"), "--initial-cluster", "n1=10.0.0.1:2380", "--cluster-token", "new"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no file", ok, "the backup FILE comes first"},
		{"no data dir", []string{"f", "--name", "n1", "--initial-cluster", "n1=10.0.0.1:2380", "--cluster-token", "t"}, "--data-dir is required"},
		{"no members", []string{"f", "--name", "n1", "--data-dir", "d", "--cluster-token", "t"}, "--initial-cluster is required"},
		{"no token", append([]string{"f"}, ok[:6]...), `--cluster-token "": must not be empty`},
		{"a zero bump", append(append([]string{"f"}, ok...), "--bump-index", "0"), "--bump-index must be positive"},
		{"a member outside the cluster", []string{"f", "--name", "n2", "--data-dir", "d", "--initial-cluster", "n1=10.0.0.1:2380", "--cluster-token", "t"}, "does not list this member"},
		{"an extra argument", append(append([]string{"f"}, ok...), "extra"), `unexpected arguments ["extra"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runRestore(tt.args)
			var usage usageError
			if !errors.As(err, &usage) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("runRestore(%q) = %v, want a usage error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestRestoreOfAMissingFileFails(t *testing.T) {
	dir := t.TempDir()
	err := run([]string{"restore", filepath.Join(dir, "missing.latch"), "--name", "n1", "--data-dir", filepath.Join(dir, "d"),
		"--initial-cluster", "n1=10.0.0.1:2380", "--cluster-token", "new"})
	var usage usageError
	if err == nil || errors.As(err, &usage) || !strings.Contains(err.Error(), "missing.latch") {
		t.Fatalf("restore of a missing file: %v, want a failure naming the file", err)
	}
	if _, statErr := os.Stat(filepath.Join(dir, "d")); !errors.Is(statErr, os.ErrNotExist) {
		t.Fatalf("a failed restore left its data directory: %v", statErr)
	}
}
