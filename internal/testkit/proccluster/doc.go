// Package proccluster runs a cluster of real latchd processes for tests:
// it builds the binary once per test binary, starts members on free
// loopback ports with the documented flags, and kills (SIGKILL), pauses
// (SIGSTOP), resumes (SIGCONT) and restarts them by process id.
//
// Invariants: it signals only processes it started, by their PID, and
// every process it started is killed and reaped in t.Cleanup. Each
// member's stdout and stderr go to a log file in a temporary directory;
// the tails of all logs are printed when the test failed. A member's data
// directory survives Kill and Restart, so a restart recovers from disk.
package proccluster
