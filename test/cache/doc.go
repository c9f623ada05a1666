// Package cache tests the Go client's watch-backed cache (client.Cache)
// against real latchd processes killed with SIGKILL.
//
// What the tests show:
//
//   - TestCacheOf10000KeysThroughKills: a cache of 10,000 keys, rewritten
//     at random by concurrent writers, equals the server's state after
//     each member in turn is killed with SIGKILL while the writes go on and
//     restarted: no change is lost across the reconnects and failovers of
//     the cache's event stream, and no stale value stays. Throughout, Get
//     never returns a key older than it returned before (monotonic).
package cache
