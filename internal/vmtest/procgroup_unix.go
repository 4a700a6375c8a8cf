//go:build unix

package vmtest

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel runs the script in a process group of its own and
// kills the whole group (the guest's qemu and its timeout included) when
// the context ends, so that no guest outlives the run.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
