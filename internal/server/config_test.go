package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestTimeoutWarnings: each timeout setting that defeats its purpose is
// logged once at start, and the defaults log nothing.
func TestTimeoutWarnings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		set      func(*Config)
		warnings []string
	}{
		{"defaults", func(*Config) {}, nil},
		{"short sessions", func(c *Config) { c.MinSessionTTL = time.Second }, []string{"minimum session timeout"}},
		{"long elections", func(c *Config) { c.ElectionTicks = 30; c.MinSessionTTL = 5 * time.Second }, []string{"election timeout is over half the request deadline"}},
		{"election at exactly half the deadline", func(c *Config) { c.ElectionTicks = 25; c.MinSessionTTL = 4 * time.Second }, nil},
		{"short deadline", func(c *Config) { c.RequestTimeout = 1500 * time.Millisecond }, []string{"election timeout is over half the request deadline"}},
		{"both", func(c *Config) { c.ElectionTicks = 40; c.MinSessionTTL = 5 * time.Second },
			[]string{"minimum session timeout", "election timeout is over half the request deadline"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged bytes.Buffer
			c := Config{Name: "n1", Logger: slog.New(slog.NewTextHandler(&logged, nil))}
			tc.set(&c)
			c.setDefaults()
			if err := c.validate(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
			if logged.Len() == 0 {
				lines = nil
			}
			if len(lines) != len(tc.warnings) {
				t.Fatalf("logged %d lines, want %d: %q", len(lines), len(tc.warnings), logged.String())
			}
			for i, want := range tc.warnings {
				if !strings.Contains(lines[i], "level=WARN") || !strings.Contains(lines[i], want) {
					t.Errorf("line %d: %q; want a warning with %q", i, lines[i], want)
				}
			}
		})
	}
}
