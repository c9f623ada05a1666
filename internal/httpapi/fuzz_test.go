package httpapi

import (
	"bytes"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/latch-io/latch/api"
)

// FuzzRequestDecoding: any query and body given to a PUT's parameter and
// body decoding yields either values or an *api.Error with a 4xx code;
// never a panic.
func FuzzRequestDecoding(f *testing.F) {
	f.Add("prev_version=3&ephemeral=true&session_id=0x1&request_seq=2", `{"value":"x"}`)
	f.Add("prev_version=none", `{"value":""}`)
	f.Add("consistency=stale&min_index=9", ``)
	f.Add("%zz=1", `{"value":1}`)
	f.Add("sequential=maybe", `{"value":"x"}{}`)
	f.Fuzz(func(t *testing.T, query, body string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		p := newParams(q, "prev_version", "ephemeral", "sequential", "session_id", "request_seq", "consistency", "min_index")
		p.precondition()
		p.bool("ephemeral")
		p.session()
		p.readOptions()
		checkAPIError(t, p.err)
		h := &Handler{maxBody: 1024}
		r := httptest.NewRequest("PUT", "/v1/kv/a", bytes.NewBufferString(body))
		var req api.PutRequest
		checkAPIError(t, h.decodeBody(httptest.NewRecorder(), r, &req))
		var sr api.SessionRequest
		r = httptest.NewRequest("POST", "/v1/session/heartbeat", bytes.NewBufferString(body))
		checkAPIError(t, h.decodeBody(httptest.NewRecorder(), r, &sr))
	})
}

func checkAPIError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if status := api.CodeOf(err).Status(); status < 400 || status > 499 {
		t.Fatalf("bad input gave %v (status %d), want a 4xx API error", err, status)
	}
}
