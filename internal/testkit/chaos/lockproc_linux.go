package chaos

import "syscall"

// lockClientProcAttr makes the kernel kill a lock client when the test
// process dies, so none outlives a crashed run. (Linux sends it when the
// thread that started the client ends; Go ends threads only for goroutines
// that exit while locked to theirs, which this package never does. A client
// killed that way shows as an early exit in the checks.)
func lockClientProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
