package main

import (
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/httpapi"
)

// TestLimitFlags: the HTTP limit flags reach httpapi.Limits, and a limit
// that is not positive is refused with an error naming its flag.
func TestLimitFlags(t *testing.T) {
	limits := httpapi.DefaultLimits()
	if _, _, _, err := parseFlags([]string{"--max-connections", "7", "--http-body-timeout", "3s", "--http-idle-timeout", "1m"}, &limits, new(securityFlags), new(zkOptions)); err != nil {
		t.Fatal(err)
	}
	if limits.MaxConnections != 7 || limits.BodyTimeout != 3*time.Second || limits.IdleTimeout != time.Minute ||
		limits.HeaderTimeout != httpapi.DefaultLimits().HeaderTimeout {
		t.Fatalf("parsed limits %+v", limits)
	}
	for _, tt := range []struct{ flag, value string }{
		{"max-connections", "0"}, {"http-header-timeout", "0s"}, {"http-body-timeout", "-1s"},
		{"http-write-timeout", "0s"}, {"http-idle-timeout", "-5m"},
	} {
		limits := httpapi.DefaultLimits()
		_, _, _, err := parseFlags([]string{"--" + tt.flag, tt.value}, &limits, new(securityFlags), new(zkOptions))
		if err == nil || !strings.Contains(err.Error(), "--"+tt.flag) {
			t.Errorf("--%s %s: %v; want an error naming the flag", tt.flag, tt.value, err)
		}
	}
}
