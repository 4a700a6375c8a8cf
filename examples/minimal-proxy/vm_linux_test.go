//go:build linux

package main

import (
	"flag"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/vmtest"
)

// ipvsGuest is the qemu guest of TestIPVSInVM when TestMain started it
// (startGuests); nil otherwise, or once the test took it.
var ipvsGuest *vmtest.Guest

// startIPVSGuest boots the guest that runs this package's IPVS tests
// (hack/vmtest/run-minimal-proxy-ipvs.sh) and returns at once.
func startIPVSGuest() *vmtest.Guest {
	return vmtest.Start("minimal-proxy's IPVS tests (this kernel has no IPVS)", "about twenty minutes",
		"run-minimal-proxy-ipvs.sh", 39*time.Minute)
}

// hasIPVS reports whether this kernel has IPVS (the IPVS tests then run
// here, not in a guest).
func hasIPVS() bool {
	_, err := os.Stat("/proc/net/ip_vs")
	return err == nil
}

// TestIPVSInVM makes the ordinary `go test ./...` (as root) cover this
// package's tests that need a kernel with IPVS on a host whose kernel has
// none: TestTraceKernelUpstreamIPVS, TestDiffKernelIPVS,
// TestTraceKernelIPVS and TestE2EKubeAPIServerIPVS (each skips here,
// naming this test) run in one qemu guest whose Debian kernel has IPVS
// (hack/vmtest/run-minimal-proxy-ipvs.sh), and this test fails when any
// of them fails or skips there. Where this kernel has IPVS, they run
// directly instead.
//
// The guest is mostly a busy core or two of emulation for about twenty
// minutes, and this test only waits on it: TestMain starts it before the
// first test (startGuests), so that it runs beside every other test of
// the package, not after the sequential ones, and gives this test a
// parallel slot of its own, so that waiting takes none of the host's e2e.
func TestIPVSInVM(t *testing.T) {
	if hasIPVS() {
		t.Skip("this kernel has IPVS: the IPVS tests run directly, no VM needed")
	}
	t.Parallel()
	g := ipvsGuest
	ipvsGuest = nil // a second run (-count) boots a guest of its own
	if g == nil {
		g = startIPVSGuest()
	}
	g.Wait(t)
}

// skipUnlessIPVS skips a test that needs IPVS where this kernel has none:
// TestIPVSInVM runs it in its guest.
func skipUnlessIPVS(t *testing.T) {
	t.Helper()
	if !hasIPVS() {
		t.Skip("this kernel has no IPVS: TestIPVSInVM runs this test in its qemu guest (hack/vmtest/run-minimal-proxy-ipvs.sh)")
	}
}

// startGuests runs in TestMain after flag.Parse: when TestIPVSInVM will
// run and this kernel has no IPVS, it starts that test's guest now and,
// unless -test.parallel was given, adds one to it for the test that only
// waits on the guest. It returns what stops a guest still running when
// the tests end (one nobody waited for).
func startGuests() (stop func()) {
	if hasIPVS() || !selectedAtStart("TestIPVSInVM") {
		return func() {}
	}
	g := startIPVSGuest()
	ipvsGuest = g
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if f := flag.Lookup("test.parallel"); f != nil && !set {
		if n, err := strconv.Atoi(f.Value.String()); err == nil {
			_ = f.Value.Set(strconv.Itoa(n + 1))
		}
	}
	return g.Stop
}

// selectedAtStart reports whether -test.run and -test.skip select the
// top-level test name, as far as their top-level parts tell (a pattern
// that does not compile selects nothing: the test then starts its guest
// itself, if it runs); -test.list runs no test.
func selectedAtStart(name string) bool {
	value := func(flagName string) string {
		if f := flag.Lookup(flagName); f != nil {
			return f.Value.String()
		}
		return ""
	}
	if value("test.list") != "" {
		return false
	}
	if run := value("test.run"); run != "" {
		re, err := regexp.Compile(strings.SplitN(run, "/", 2)[0])
		if err != nil || !re.MatchString(name) {
			return false
		}
	}
	if skip := value("test.skip"); skip != "" && !strings.Contains(skip, "/") {
		re, err := regexp.Compile(skip)
		if err != nil || re.MatchString(name) {
			return false
		}
	}
	return true
}

func TestSelectedAtStart(t *testing.T) {
	for _, tc := range []struct {
		run, skip, list string
		want            bool
	}{
		{want: true},
		{run: "TestIPVSInVM", want: true},
		{run: "^TestIPVSInVM$/x", want: true},
		{run: "IPVS", want: true},
		{run: "^TestDryRunDemo$", want: false},
		{run: "TestDryRun|TestIPVSInVM", want: true},
		{run: "(", want: false},
		{skip: "TestIPVSInVM", want: false},
		{skip: "TestIPVSInVM/sub", want: true},
		{skip: "TestDryRun", want: true},
		{list: ".", want: false},
	} {
		for name, v := range map[string]string{"test.run": tc.run, "test.skip": tc.skip, "test.list": tc.list} {
			f := flag.Lookup(name)
			old := f.Value.String()
			if err := f.Value.Set(v); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Value.Set(old) })
		}
		if got := selectedAtStart("TestIPVSInVM"); got != tc.want {
			t.Errorf("-run %q -skip %q -list %q: selectedAtStart = %v, want %v", tc.run, tc.skip, tc.list, got, tc.want)
		}
	}
}
