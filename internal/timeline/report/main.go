// Command report prints where the wall time of one write went, from the
// timeline files of a leader and its followers (package timeline):
//
//	go run ./internal/timeline/report LEADER_FILE FOLLOWER_FILE...
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/latch-io/latch/internal/timeline"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: report LEADER_FILE [FOLLOWER_FILE...]")
		os.Exit(2)
	}
	var members [][]timeline.Event
	for _, name := range os.Args[1:] {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		events, err := timeline.Parse(f, name)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		members = append(members, events)
	}
	steps := timeline.Breakdown(members[0], members[1:])
	fmt.Printf("| member | stage | after the proposal: p50 | p90 | p99 | writes |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, s := range steps {
		fmt.Printf("| %s | %s | %.0f µs | %.0f µs | %.0f µs | %d |\n", s.Member, s.Stage,
			micros(s.P50), micros(s.P90), micros(s.P99), s.Writes)
	}
}

func micros(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1e3
}
