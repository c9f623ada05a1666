//go:build !linux

package chaos

import "syscall"

// lockClientProcAttr: without Pdeathsig, a lock client outlives a crashed
// test process only until it reads the end of its stdin.
func lockClientProcAttr() *syscall.SysProcAttr { return nil }
