package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// The request path over real loopback HTTP/1.1 and one keep-alive
// connection, against one in-process member: what a client request costs
// the server and the client together, per operation. Allocations are the
// stable figure on a shared machine; time includes the system calls.
//
//	go test -run XXX -bench 'BenchmarkHTTP' -benchmem ./internal/httpapi

func benchmarkRequest(b *testing.B, method, path, body string) {
	c := testcluster.New(b, 1, testcluster.Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	url := c.URL(0)
	do := func(method, path, body string) {
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s %s: %s", method, path, resp.Status)
		}
	}
	value := `{"value":"` + strings.Repeat("v", 256) + `"}`
	do(http.MethodPut, "/v1/kv/bench/key", value)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		do(method, path, body)
	}
}

func BenchmarkHTTPGetStale(b *testing.B) {
	benchmarkRequest(b, http.MethodGet, "/v1/kv/bench/key?consistency=stale", "")
}

func BenchmarkHTTPGetLinearizable(b *testing.B) {
	benchmarkRequest(b, http.MethodGet, "/v1/kv/bench/key", "")
}

func BenchmarkHTTPPut(b *testing.B) {
	benchmarkRequest(b, http.MethodPut, "/v1/kv/bench/key", `{"value":"`+strings.Repeat("v", 256)+`"}`)
}
