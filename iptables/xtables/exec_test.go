package xtables_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// fakeTools puts scripts named iptables-legacy{,-restore,-save} on PATH:
// each logs its arguments to <dir>/args and then runs body.
func fakeTools(t *testing.T, version, body string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("shell scripts")
	}
	dir := t.TempDir()
	for _, name := range []string{"iptables-legacy", "iptables-legacy-restore", "iptables-legacy-save"} {
		script := "#!/bin/sh\n" +
			"if [ \"$1\" = --version ]; then echo 'iptables " + version + " (legacy)'; exit 0; fi\n" +
			"echo \"${0##*/} $*\" >> " + filepath.Join(dir, "args") + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

func args(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "args"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A tool that gives up on the xtables lock (exit 4, as iptables does)
// makes a typed, counted error; the lock wait is bounded on every call.
func TestExecRunnerLockHeld(t *testing.T) {
	dir := fakeTools(t, "v1.8.9", "echo 'Another app is currently holding the xtables lock. Stopped waiting after 5s.' >&2; exit 4")
	held := map[string]int{}
	r, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: xtables.BackendLegacy, LegacyTool: true,
		OnLockHeld: func(tool string) { held[tool]++ }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = r.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\nCOMMIT\n")})
	var re *xtables.RestoreError
	var le *xtables.LockError
	if !errors.As(err, &re) || !errors.As(err, &le) || !errors.Is(err, xtables.ErrLockHeld) || !errors.Is(err, xtables.ErrRestore) {
		t.Fatalf("Restore = %v, want a *RestoreError wrapping a *LockError", err)
	}
	if le.Wait != xtables.DefaultLockWait {
		t.Errorf("LockError.Wait = %v, want %v", le.Wait, xtables.DefaultLockWait)
	}
	if _, err := r.EnsureChain(ctx, xtables.TableNAT, "KUBE-X"); !errors.Is(err, xtables.ErrLockHeld) {
		t.Fatalf("EnsureChain = %v, want ErrLockHeld", err)
	}
	if held["iptables-legacy-restore"] != 1 || held["iptables-legacy"] != 1 {
		t.Errorf("lock timeouts counted %v, want one per tool", held)
	}
	got := args(t, dir)
	for _, want := range []string{"iptables-legacy-restore --noflush -w 5\n", "iptables-legacy -w 5 -t nat -n -L KUBE-X 1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("commands run:\n%s\nwant a line %q (1.8.9 takes no -W)", got, want)
		}
	}
}

// Before iptables 1.8.8 the tools poll the lock; they are told to every
// 100 ms, as kube-proxy does. A non-lock failure is not a lock error.
func TestExecRunnerWaitIntervalAndOtherErrors(t *testing.T) {
	dir := fakeTools(t, "v1.8.7", "echo 'iptables-restore: line 2 failed' >&2; exit 1")
	r, err := xtables.New(xtables.RunnerConfig{Backend: xtables.BackendLegacy, LegacyTool: true, LockWait: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Restore(context.Background(), xtables.RestoreInput{Text: []byte("*nat\n-A X -j Y\nCOMMIT\n")})
	var re *xtables.RestoreError
	if !errors.As(err, &re) || errors.Is(err, xtables.ErrLockHeld) || re.Line != 2 || re.LineText != "-A X -j Y" {
		t.Fatalf("Restore = %#v, want a *RestoreError at line 2 that is no lock error", err)
	}
	if got := args(t, dir); !strings.Contains(got, "--noflush -w 2 -W 100000\n") {
		t.Errorf("commands run:\n%s\nwant the wait rounded up to 2 s and -W 100000", got)
	}
}

// A command ends when its context does, whatever the tool is waiting for.
func TestExecRunnerHonoursContext(t *testing.T) {
	fakeTools(t, "v1.8.9", "exec sleep 60")
	r, err := xtables.New(xtables.RunnerConfig{Backend: xtables.BackendLegacy, LegacyTool: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := r.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\nCOMMIT\n")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Restore = %v, want context.DeadlineExceeded", err)
	}
	if _, err := r.ChainExists(ctx, xtables.TableNAT, "KUBE-X"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ChainExists = %v, want context.DeadlineExceeded", err)
	}
}

// On Linux the restore tool reads its input from a file, never a pipe:
// iptables 1.8.8 and later leave the lock's alarm(wait) pending, and its
// SIGALRM ends the tool's input loop when it interrupts a read waiting on
// a pipe (the rest of the input silently dropped between tables).
func TestExecRunnerRestoreInputIsAFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("memfd input is Linux only")
	}
	input := []byte("*filter\n:FOO - [0:0]\nCOMMIT\n*nat\n:BAR - [0:0]\nCOMMIT\n")
	got := filepath.Join(t.TempDir(), "input")
	fakeTools(t, "v1.8.11", "if [ -p /dev/stdin ]; then echo 'stdin is a pipe' >&2; exit 1; fi; cat > "+got)
	r, err := xtables.New(xtables.RunnerConfig{Backend: xtables.BackendLegacy, LegacyTool: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore(context.Background(), xtables.RestoreInput{Text: input}); err != nil {
		t.Fatalf("Restore = %v", err)
	}
	if b, err := os.ReadFile(got); err != nil || string(b) != string(input) {
		t.Errorf("the tool read %q (%v), want %q", b, err, input)
	}
}
