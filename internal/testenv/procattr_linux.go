//go:build linux

package testenv

import "syscall"

// sysProcAttr puts child processes in their own process group and has the
// kernel kill them if the test binary dies without running Stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
