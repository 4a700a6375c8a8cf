package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCheckPrivileges(t *testing.T) {
	caps := func(v uint64) privilegeChecks {
		return privilegeChecks{goos: "linux", effectiveCaps: func() (uint64, error) { return v, nil }}
	}
	if err := checkPrivileges(caps(1 << capNetAdmin)); err != nil {
		t.Errorf("CAP_NET_ADMIN alone: %v", err)
	}
	if err := checkPrivileges(caps(0x1ff)); !errors.Is(err, errNoNetAdmin) {
		t.Errorf("without CAP_NET_ADMIN: %v", err)
	}
	if err := checkPrivileges(privilegeChecks{goos: "windows"}); err != nil {
		t.Errorf("windows: %v", err)
	}
	// This process's own capabilities are readable.
	if _, err := readEffectiveCaps(); err != nil {
		t.Errorf("readEffectiveCaps: %v", err)
	}
}

// A real run without CAP_NET_ADMIN stops before anything starts, with the
// reason, instead of logging "Proxy running" and retrying forever.
func TestRealRunWithoutNetAdmin(t *testing.T) {
	o, err := parseOptions([]string{"--objects-file=demo.yaml", "--healthz-bind-address=", "--metrics-bind-address="}, "linux", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.privileges = privilegeChecks{goos: "linux", effectiveCaps: func() (uint64, error) { return 0, nil }}
	var logs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = serve(ctx, o, io.Discard, newLogger(&logs, &logs, LoggingConfig{}))
	if !errors.Is(err, errNoNetAdmin) {
		t.Fatalf("serve = %v, want errNoNetAdmin\n%s", err, logs.String())
	}
	if strings.Contains(logs.String(), "Proxy running") || strings.Contains(logs.String(), "serving") {
		t.Errorf("started something before refusing:\n%s", logs.String())
	}
}

// The binary run as an unprivileged user (no capabilities at all): a real
// run and --cleanup each exit 1 at once with one line saying why, and
// --cleanup claims to have removed nothing.
func TestBinaryWithoutPrivileges(t *testing.T) {
	skipUnlessRoot(t) // to switch to an unprivileged user
	bin := buildProxyBinary(t)
	objects := filepath.Join(testBinDir, "objects-"+strings.ReplaceAll(t.Name(), "/", "_")+".yaml")
	demo, err := os.ReadFile("demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(objects, demo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"real run", []string{"--objects-file=" + objects, "--healthz-bind-address=", "--metrics-bind-address="}},
		{"cleanup", []string{"--cleanup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := execAsNobody(ctx, bin, tc.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit interface{ ExitCode() int }
			if !errors.As(err, &exit) || exit.ExitCode() != exitFailed {
				t.Fatalf("exit: %v, want status %d\nstderr:\n%s", err, exitFailed, stderr.String())
			}
			var errorLines []string
			for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
				if strings.Contains(line, `"error"=`) {
					errorLines = append(errorLines, line)
				}
			}
			if len(errorLines) != 1 || !strings.Contains(errorLines[0], "CAP_NET_ADMIN") {
				t.Errorf("want one error line naming CAP_NET_ADMIN, got:\n%s", stderr.String())
			}
			for _, never := range []string{"Proxy running", "Removed", "Cleanup done"} {
				if strings.Contains(stderr.String(), never) {
					t.Errorf("logs %q without privileges:\n%s", never, stderr.String())
				}
			}
		})
	}
}

// execAsNobody prepares bin to run as user and group 65534, which drops
// every capability. No Pdeathsig: it would fire when the forking OS thread
// ends, which other goroutines of this package can cause (startProcess);
// ctx ends the child.
func execAsNobody(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	return cmd
}

// --init-only applies the conntrack settings (in a namespace of the
// test's own: the timeouts are per network namespace) and exits 0; with
// conntrack-max-per-core=0 nf_conntrack_max and the host-wide hash table
// are left alone. A read-only setting would be a warning line each, and
// --init-only's exit status 1.
func TestInitOnly(t *testing.T) {
	skipUnlessRoot(t)
	if _, err := os.Stat("/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established"); err != nil {
		t.Skipf("no conntrack sysctls on this host: %v", err)
	}
	_, inNS := newNamespace(t)
	logPath := filepath.Join(t.TempDir(), "init-only.log")
	p := startProcess(t, inNS, "minimal-proxy --init-only", logPath, buildProxyBinary(t), "--init-only",
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=2h", "--conntrack-udp-timeout=45s")
	if !p.wait(slowdown(time.Minute)) {
		t.Fatalf("--init-only still running:\n%s", readFile(logPath))
	}
	if p.err != nil {
		t.Fatalf("--init-only: %v\n%s", p.err, readFile(logPath))
	}
	for name, want := range map[string]string{"nf_conntrack_tcp_timeout_established": "7200", "nf_conntrack_udp_timeout": "45"} {
		if got := strings.TrimSpace(commandIn(t, inNS, "cat", "/proc/sys/net/netfilter/"+name)); got != want {
			t.Errorf("%s in the namespace = %s, want %s\n%s", name, got, want, readFile(logPath))
		}
	}
	if log := readFile(logPath); strings.Contains(log, "nf_conntrack_max") || strings.Contains(log, "hashsize") || !strings.Contains(log, "Initialization done") {
		t.Errorf("log:\n%s", log)
	}
}
