// Package ui tests latch's dashboard (/ui, package internal/ui) in a real
// browser: headless Chromium, driven over the DevTools protocol
// (github.com/chromedp/chromedp), opens /ui of a 3-member cluster of real
// latchd processes (internal/testkit/proccluster) and checks the page's DOM
// while the cluster changes under it.
//
// What TestDashboardInBrowser shows:
//
//   - the members table lists the three members with exactly one leader, the
//     one the members themselves name;
//   - the key browser lists a node and, clicked, shows its value; the load
//     charts and watch figures are drawn from /metrics;
//   - a lock taken by the real latchctl binary ('latchctl lock') appears
//     with its fencing token within 2 s of latchctl holding it, and its
//     holder's session handle in the sessions table; an election won by
//     'latchctl elect' appears with its token and value;
//   - after kill -9 of the raft leader, the new leader shows within 5 s and
//     the killed member shows as down;
//   - the page loads nothing from any origin but the member that served it,
//     and throws no JavaScript exception;
//   - screenshots of each step are saved to the directory the test logs
//     (LATCH_UI_SCREENSHOTS, or the test's temporary directory).
//
// What TestDashboardLoginAndShards shows, on a cluster with auth enabled
// and two shards: the page opens on its login form and shows no data; a
// wrong password is refused on the form; signed in, it shows the members
// (all up, the leader the members name) and one row per shard with the
// leader the members name and its term, commit and applied index; the
// sign-in survives a reload; sign out hides and clears everything and the
// token no longer works.
//
// Chromium is found as LATCH_CHROMIUM or chromium, chromium-browser or
// google-chrome on PATH. Without one the test skips with a message, unless
// LATCH_REQUIRE_BROWSER is set (.ci/run installs Chromium and sets it), when
// it fails. Run as root, Chromium gets --no-sandbox. The test ends only what
// it started: the latchd members by PID (proccluster), latchctl by its own
// process group, Chromium through chromedp (its process and the helpers that
// carry its unique user-data directory).
package ui
