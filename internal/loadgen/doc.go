// Package loadgen holds latch's load generators, which `latchctl bench`,
// `latchctl session-bench` and `latchctl lock-bench` run against a live
// cluster: the KV benchmark (RunBench), the session fleet (RunSessionBench)
// and the lock hand-off benchmark (RunLockBench), what they share (the
// cluster under load and its connection pool, timed runs, latency and error
// figures, the load generator's CPU profile) and the per-server figures they
// read from /v1/status and /metrics. Each run takes a config (the commands'
// flags, checked by Validate, which refuses with a *UsageError) and returns a
// result that encodes as the commands' JSON report, or prints as their text
// one. The cobra commands stay in internal/cli; latency holds the histogram.
package loadgen
