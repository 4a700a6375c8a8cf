//go:build !linux

package main

// startGuests: the qemu guests are Linux only (vm_linux_test.go).
func startGuests() (stop func()) { return func() {} }
