package testcluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestReplication writes through every node (followers forward) and reads
// the writes back, linearizably, from every node.
func TestReplication(t *testing.T) {
	c := New(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	for i := range c.Nodes {
		path := fmt.Sprintf("/r/k%d", i)
		n, err := Put(ctx, c.URL(i), path, fmt.Sprintf("v%d", i), "none")
		if err != nil {
			t.Fatalf("put %s through n%d: %v", path, i+1, err)
		}
		if n.Version != 1 || n.Index == 0 {
			t.Fatalf("put %s: got %+v, want version 1 and an index", path, n)
		}
	}
	for i := range c.Nodes {
		for j := range c.Nodes {
			path := fmt.Sprintf("/r/k%d", j)
			n, err := Get(ctx, c.URL(i), path, api.Linearizable)
			if err != nil {
				t.Fatalf("get %s from n%d: %v", path, i+1, err)
			}
			if n.Value != fmt.Sprintf("v%d", j) {
				t.Fatalf("get %s from n%d = %q", path, i+1, n.Value)
			}
		}
	}
	c.EnsureSame(10 * time.Second)
}

// TestPreconditions checks prev_version none, N and a mismatch.
func TestPreconditions(t *testing.T) {
	c := New(t, 3, Options{})
	ctx := ctxT(t, 30*time.Second)
	url := c.URL(c.WaitLeader(5 * time.Second))
	if _, err := Put(ctx, url, "/p", "a", "none"); err != nil {
		t.Fatal(err)
	}
	_, err := Put(ctx, url, "/p", "b", "none")
	if api.CodeOf(err) != api.CodePreconditionFailed {
		t.Fatalf("second create with prev_version=none: err %v, want precondition_failed", err)
	}
	if _, err := Put(ctx, url, "/p", "c", "1"); err != nil {
		t.Fatalf("CAS at version 1: %v", err)
	}
	if _, err := Put(ctx, url, "/p", "d", "1"); api.CodeOf(err) != api.CodePreconditionFailed {
		t.Fatalf("stale CAS: err %v, want precondition_failed", err)
	}
	n, err := Get(ctx, url, "/p", api.Linearizable)
	if err != nil || n.Value != "c" || n.Version != 2 {
		t.Fatalf("get after CAS: %+v, %v", n, err)
	}
	if !errors.Is(err, nil) {
		t.Fatal(err)
	}
}
