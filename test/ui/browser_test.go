package ui_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Environment variables of the browser test.
const (
	chromiumEnv       = "LATCH_CHROMIUM"        // path of the browser binary
	requireBrowserEnv = "LATCH_REQUIRE_BROWSER" // set: a missing browser fails the test
	screenshotsEnv    = "LATCH_UI_SCREENSHOTS"  // directory for the screenshots
)

// findChromium returns the browser to run, skipping (or, with
// LATCH_REQUIRE_BROWSER, failing) the test when there is none.
func findChromium(t *testing.T) string {
	t.Helper()
	if path := os.Getenv(chromiumEnv); path != "" {
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	msg := "no Chromium: install the Debian package chromium (.ci/run does) or set " + chromiumEnv
	if os.Getenv(requireBrowserEnv) != "" {
		t.Fatalf("%s (%s is set)", msg, requireBrowserEnv)
	}
	t.Skip(msg)
	return ""
}

// browser is one headless Chromium tab, with what it has seen: every URL
// it requested and every JavaScript exception thrown.
type browser struct {
	ctx context.Context

	mu         sync.Mutex
	requests   []string // guarded by mu
	exceptions []string // guarded by mu
}

// startBrowser starts Chromium with one tab; the test's cleanup ends it.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(findChromium(t)),
		chromedp.WindowSize(1400, 1200),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	b := &browser{ctx: ctx}
	if err := chromedp.Listen(ctx, b.record); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("enable network events: %v", err)
	}
	if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("enable runtime events: %v", err)
	}
	return b
}

// record keeps the requests and exceptions the tab reports (it runs on
// chromedp's reading goroutine: it only appends).
func (b *browser) record(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, e.Request.URL)
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		b.exceptions = append(b.exceptions, text)
	}
}

// navigate opens u in the tab.
func (b *browser) navigate(t *testing.T, u string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
}

// eval evaluates a JavaScript expression in the page into a T.
func eval[T any](b *browser, expression string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expression))
}

// screenshot saves the whole page as dir/name.png.
func (b *browser) screenshot(t *testing.T, dir, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("save screenshot: %v", err)
	}
	t.Logf("screenshot %s", path)
}

// foreignRequests returns the requests the tab made to any origin other
// than origin (data: URLs excepted).
func (b *browser) foreignRequests(origin string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var foreign []string
	for _, r := range b.requests {
		u, err := url.Parse(r)
		if err != nil || u.Scheme == "data" {
			continue
		}
		if !strings.EqualFold(u.Scheme+"://"+u.Host, origin) {
			foreign = append(foreign, r)
		}
	}
	return foreign
}

// requestCount returns how many requests the tab made.
func (b *browser) requestCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.requests)
}

// exceptionsThrown returns the JavaScript exceptions the page threw.
func (b *browser) exceptionsThrown() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.exceptions...)
}

// screenshotDir is LATCH_UI_SCREENSHOTS (created if missing) or a
// directory under the test's temporary directory.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("screenshot directory: %v", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatalf("screenshot directory: %v", err)
	}
	t.Logf("screenshots go to %s (set %s to keep them elsewhere)", abs, screenshotsEnv)
	return abs
}
