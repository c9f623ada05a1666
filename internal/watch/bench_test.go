package watch

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/fsm"
)

// BenchmarkPublishNoMatch publishes events that no watch matches: the cost
// every applied write pays for watches it does not have.
func BenchmarkPublishNoMatch(b *testing.B) {
	for _, watchers := range []int{0, 10_000} {
		b.Run(fmt.Sprintf("watches=%d", watchers), func(b *testing.B) {
			r := New(Options{})
			for i := range watchers {
				spec := Spec{Path: fmt.Sprintf("/other/%d", i), Recursive: i%2 == 0, Persistent: true}
				mustAdd(b, r, uint64(1+i/DefaultMaxPerSession), spec, 1, Current{})
			}
			events := []fsm.Event{changed("/svc/config/db/primary", 0)}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				events[0].Index = uint64(2 + i)
				r.PublishLocked(events)
			}
		})
	}
}

// BenchmarkPublishFanOut publishes a change of one key that 10,000 sessions
// watch: the cost of queuing the notifications, without delivering them.
func BenchmarkPublishFanOut(b *testing.B) {
	const watchers = 10_000
	for _, persistent := range []bool{false, true} {
		b.Run(fmt.Sprintf("persistent=%v", persistent), func(b *testing.B) {
			r := New(Options{})
			arm := func(at uint64) {
				for session := uint64(1); session <= watchers; session++ {
					if s := r.sessions[session]; s != nil {
						s.mu.Lock()
						r.queuedEvents.Add(-int64(s.queue.clear()))
						s.mu.Unlock()
					}
					if persistent && r.watches == watchers {
						continue
					}
					mustAdd(b, r, session, Spec{Path: "/hot", Persistent: persistent}, at, Current{})
				}
			}
			arm(1)
			b.ReportAllocs()
			events := []fsm.Event{changed("/hot", 0)}
			var publishing time.Duration
			for i := 0; b.Loop(); i++ {
				index := uint64(2 + i)
				if !persistent || i%512 == 511 {
					b.StopTimer()
					arm(index - 1)
					b.StartTimer()
				}
				events[0].Index = index
				start := time.Now()
				r.PublishLocked(events)
				publishing += time.Since(start)
			}
			if r.stats.SessionsDisconnected != 0 {
				b.Fatalf("%d sessions disconnected", r.stats.SessionsDisconnected)
			}
			b.ReportMetric(float64(watchers*b.N)/publishing.Seconds(), "events/s")
		})
	}
}

// BenchmarkFanOutDelivered measures, for one change of a key that 10,000
// sessions watch (each with its own stream and consumer goroutine), the time
// from Publish to the last consumer having the event's JSON, as an SSE
// writer needs it: each consumer waits on Ready, takes and appends
// Delivery.AppendJSON (one encoding per event, shared by its watchers).
func BenchmarkFanOutDelivered(b *testing.B) {
	const watchers = 10_000
	r := New(Options{})
	var received sync.WaitGroup
	var consumers sync.WaitGroup
	streams := make([]*Stream, 0, watchers)
	for session := uint64(1); session <= watchers; session++ {
		mustAdd(b, r, session, Spec{Path: "/hot", Persistent: true}, 1, Current{})
		stream := r.Stream(session)
		streams = append(streams, stream)
		consumers.Go(func() { takeAndEncode(stream, received.Done) })
	}
	events := []fsm.Event{changed("/hot", 0)}
	var latencies []time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		received.Add(watchers)
		events[0].Index = uint64(2 + i)
		start := time.Now()
		r.PublishLocked(events)
		received.Wait()
		latencies = append(latencies, time.Since(start))
	}
	for _, stream := range streams {
		stream.Close()
	}
	consumers.Wait()
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(watchers)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// takeAndEncode consumes stream as the SSE writer does, calling done for
// each event, until the stream ends.
func takeAndEncode(stream *Stream, done func()) {
	into := make([]Delivery, 8)
	var buf []byte
	for {
		n, ended := stream.Take(into)
		if ended {
			return
		}
		for _, d := range into[:n] {
			buf = d.AppendJSON(buf[:0])
			done()
		}
		if n > 0 {
			continue
		}
		select {
		case <-stream.Ready():
		case <-stream.Done():
		}
	}
}

// BenchmarkAdd registers persistent watches on distinct paths, a thousand
// per session, and reports the heap they hold.
func BenchmarkAdd(b *testing.B) {
	for _, recursive := range []bool{false, true} {
		b.Run(fmt.Sprintf("recursive=%v", recursive), func(b *testing.B) {
			paths := make([]string, 100_000)
			for i := range paths {
				paths[i] = fmt.Sprintf("/svc/%d/config", i)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			r := New(Options{HistoryLen: 1})
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				spec := Spec{Path: paths[i%len(paths)], Recursive: recursive, Persistent: true}
				if _, err := r.AddLocked(uint64(1+i/DefaultMaxPerSession), spec, 1, Current{}); err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "heap-bytes/watch")
			runtime.KeepAlive(r)
		})
	}
}

// BenchmarkAddKnownIndex registers a watch with a known_index as old as the
// history reaches, on a path nothing in it matches: the worst case of the
// catch-up check, a scan of the whole history ring.
func BenchmarkAddKnownIndex(b *testing.B) {
	r := New(Options{})
	events := make([]fsm.Event, DefaultHistoryLen)
	for i := range events {
		events[i] = changed(fmt.Sprintf("/busy/%d", i%100), uint64(10+i))
	}
	r.PublishLocked(events)
	at := events[len(events)-1].Index
	spec := Spec{Path: "/quiet", Recursive: true, KnownIndex: events[0].Index}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := r.AddLocked(uint64(1+i/DefaultMaxPerSession), spec, at, Current{Exists: true, ModifiedIndex: 1}); err != nil {
			b.Fatal(err)
		}
	}
}
