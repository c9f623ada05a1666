// Package process holds tests that run latchd as real operating-system
// processes on loopback: they build the binary, start a cluster with the
// documented flags, kill -9 members and restart them, and check what clients
// were told against what every node holds afterwards (checker D).
//
// Every process a test starts is killed in t.Cleanup; nothing else is
// touched.
package process
