//go:build linux

package nftables

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// The versions the nftables mode needs, as upstream kube-proxy's: nft
// 1.0.1 (older ones parse the whole ruleset, and a table another program
// wrote in a newer syntax can make them fail on ours), and kernel 5.13,
// which upstream takes as the sign that the distribution's own nft is new
// enough not to be broken by the rules we write.
const (
	MinKernelVersion = "5.13"
	MinNFTVersion    = "1.0.1"
	// SkipKernelVersionCheckEnv, set to anything non-empty, skips the
	// kernel check (not the nft one), as it does for upstream.
	SkipKernelVersionCheckEnv = "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK"
)

// VersionError says that the host is below one requirement of the
// nftables mode. nftkernel.NewInterfaces returns it (with a second one when both
// requirements fail: find them with errors.As, or Unwrap() []error);
// callers fall back to another mode.
type VersionError struct {
	// Component is "kernel" or "nft".
	Component string
	// Have is the version found: the kernel release as
	// /proc/sys/kernel/osrelease gives it, or nft's version number.
	Have string
	// Need is the oldest version accepted (MinKernelVersion or
	// MinNFTVersion).
	Need string
}

func (e *VersionError) Error() string {
	msg := fmt.Sprintf("the nftables mode needs %s %s or later, this host has %s", e.Component, e.Need, e.Have)
	if e.Component == "kernel" {
		msg += " (" + SkipKernelVersionCheckEnv + "=1 skips this check)"
	}
	return msg
}

// CheckVersions checks a kernel release (the contents of
// /proc/sys/kernel/osrelease) and the output of `nft --version` against
// MinKernelVersion and MinNFTVersion; skipKernel leaves the kernel out. It
// returns nil, an error that wraps one *VersionError per requirement not
// met (Unwrap() []error), or a plain error when a version cannot be read.
func CheckVersions(kernelRelease, nftVersion string, skipKernel bool) error {
	var errs []error
	if !skipKernel {
		have := strings.TrimSpace(kernelRelease)
		v, err := parseVersion(have)
		if err != nil {
			return fmt.Errorf("nftables: cannot read the kernel version: %w", err)
		}
		if versionLess(v, mustParseVersion(MinKernelVersion)) {
			errs = append(errs, &VersionError{Component: "kernel", Have: have, Need: MinKernelVersion})
		}
	}
	have, err := nftVersionNumber(nftVersion)
	if err != nil {
		return err
	}
	v, err := parseVersion(have)
	if err != nil {
		return fmt.Errorf("nftables: cannot read the nft version: %w", err)
	}
	if versionLess(v, mustParseVersion(MinNFTVersion)) {
		errs = append(errs, &VersionError{Component: "nft", Have: have, Need: MinNFTVersion})
	}
	if len(errs) == 0 {
		return nil
	}
	return versionErrors(errs)
}

// versionErrors joins the refusals on one line (errors.Join would put a
// newline between them, and they end up in one log line).
type versionErrors []error

func (e versionErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e versionErrors) Unwrap() []error { return e }

// CheckHostVersions runs CheckVersions on this host's kernel and nft (the
// first nft on PATH), honouring SkipKernelVersionCheckEnv. No nft on PATH
// is not its concern: it returns nil and leaves that error to knftables.
func CheckHostVersions() error {
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("nftables: %s --version: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	skip := os.Getenv(SkipKernelVersionCheckEnv) != ""
	var release []byte
	if !skip {
		if release, err = os.ReadFile("/proc/sys/kernel/osrelease"); err != nil {
			return fmt.Errorf("nftables: cannot read the kernel version: %w", err)
		}
	}
	return CheckVersions(string(release), string(out), skip)
}

// nftVersionNumber takes the number out of `nft --version` output:
// "nftables v1.0.6 (Lester Gooch #5)" gives "1.0.6".
func nftVersionNumber(out string) (string, error) {
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "nftables" || !strings.HasPrefix(f[1], "v") {
		return "", fmt.Errorf("nftables: unexpected nft --version output %q", strings.TrimSpace(out))
	}
	return strings.TrimPrefix(f[1], "v"), nil
}

// parseVersion reads the leading dotted numbers of a version: "5.10.0-32-
// cloud-amd64" gives [5 10 0], "6.12" gives [6 12], "1.1.3" [1 1 3].
func parseVersion(s string) ([]int, error) {
	end := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end >= 0 {
		s = s[:end]
	}
	s = strings.TrimRight(s, ".")
	if s == "" {
		return nil, errors.New("no version number")
	}
	var v []int
	for _, p := range strings.Split(s, ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("version %q: %w", s, err)
		}
		v = append(v, n)
	}
	return v, nil
}

func mustParseVersion(s string) []int {
	v, err := parseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// versionLess compares component by component; a missing component is 0
// (5.13 equals 5.13.0).
func versionLess(a, b []int) bool {
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return x < y
		}
	}
	return false
}
