// Package checker tests 'latchctl check' as a user runs it: the latchctl
// binary, built once, against clusters of real latchd processes
// (internal/testkit/proccluster) on loopback. A healthy cluster passes; a
// cluster started with one of latchd's planted bugs (its hidden --unsafe-
// flags, the fault suite's) fails with the anomaly the bug causes; the check
// refuses a prefix it must not own and removes what it wrote, also when
// interrupted.
//
// Every process a test starts is ended by its own PID; nothing else is
// touched.
package checker
