package fastpath

import "golang.org/x/sys/unix"

// KernelVersion is the running kernel's release (uname -r); zero when
// unknown.
func KernelVersion() Version {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return Version{}
	}
	v, _ := ParseVersion(unix.ByteSliceToString(u.Release[:]))
	return v
}
