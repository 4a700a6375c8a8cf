//go:build !unix

package vmtest

import "os/exec"

// killGroupOnCancel: the VM runner is Linux only; the script alone is killed.
func killGroupOnCancel(*exec.Cmd) {}
