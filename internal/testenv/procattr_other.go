//go:build !linux

package testenv

import "syscall"

// sysProcAttr puts child processes in their own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
