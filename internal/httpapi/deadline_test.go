package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// deadlineRecorder is a ResponseWriter that records the write deadlines
// http.ResponseController sets on it.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	set []time.Time
}

func (r *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	r.set = append(r.set, t)
	return nil
}

// TestStreamDeadlineMovesLazily checks deadlineWriter's two promises to an
// event stream: after every flush the client has at least WriteTimeout to
// take it, and a stream flushing all the time moves the deadline about
// once a quarter WriteTimeout, not once a flush.
func TestStreamDeadlineMovesLazily(t *testing.T) {
	const timeout = 100 * time.Millisecond
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	w := &deadlineWriter{ResponseWriter: rec, rc: http.NewResponseController(rec), timeout: timeout}
	start := time.Now()
	flushes := 0
	for time.Since(start) < 3*timeout {
		before := time.Now()
		if _, err := w.Write([]byte("data: {}\n\n")); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		flushes++
		if len(rec.set) == 0 {
			t.Fatal("a flush set no write deadline")
		}
		if last := rec.set[len(rec.set)-1]; last.Sub(before) < timeout {
			t.Fatalf("after flush %d the client has %v to take it, want at least %v", flushes, last.Sub(before), timeout)
		}
		if last := rec.set[len(rec.set)-1]; last.Sub(before) > timeout+timeout/deadlineSlack+time.Since(before) {
			t.Fatalf("after flush %d the deadline is %v away, want at most %v", flushes, last.Sub(before), timeout+timeout/deadlineSlack)
		}
	}
	elapsed := time.Since(start)
	if most := int(elapsed/(timeout/deadlineSlack)) + 1; len(rec.set) > most || len(rec.set) < 2 {
		t.Fatalf("%d flushes over %v set the deadline %d times, want 2 to %d", flushes, elapsed, len(rec.set), most)
	}
	t.Logf("%d flushes over %v set the deadline %d times", flushes, elapsed.Round(time.Millisecond), len(rec.set))
}
