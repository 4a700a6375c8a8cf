//go:build linux

package netnstest

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/vishvananda/netns"
)

// newNamespace creates a fresh named network namespace without touching
// the calling thread: a throwaway locked thread unshares and then exits.
func newNamespace(role string) (*Namespace, error) {
	name := fmt.Sprintf("%s%d-%d-%s", NamePrefix, os.Getpid(), nsSeq.Add(1), role)
	errc := make(chan error, 1)
	go func() {
		// The thread stays locked and dies with this goroutine, so its
		// changed namespace never leaks to other goroutines.
		runtime.LockOSThread()
		h, err := netns.NewNamed(name)
		if err == nil {
			h.Close()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("netnstest: create namespace %s: %w", name, err)
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		_ = netns.DeleteNamed(name)
		return nil, fmt.Errorf("netnstest: open namespace %s: %w", name, err)
	}
	return &Namespace{Name: name, Role: role, handle: h}, nil
}

// close releases the handle and removes the name; the kernel frees the
// namespace once no socket or process uses it.
func (n *Namespace) close() error {
	var errs []error
	if n.handle.IsOpen() {
		errs = append(errs, n.handle.Close())
		n.handle = netns.None()
	}
	if err := netns.DeleteNamed(n.Name); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("netnstest: delete namespace %s: %w", n.Name, err))
	}
	return errors.Join(errs...)
}

// Exec runs f on an OS thread that has entered ns, and returns f's error.
//
// Everything f does on its own goroutine happens in ns: sockets it opens
// stay in ns afterwards (and may be used from any goroutine), and commands
// it starts with os/exec (iptables-restore, conntrack, ip) inherit ns,
// because Go forks from the calling thread. Goroutines f starts do not run
// in ns. f must not call t.FailNow (or anything that calls
// runtime.Goexit); a panic in f is re-raised in the caller.
//
// This is how engines must be driven in a real-kernel test: call the
// engine's Sync (or Run) inside Exec(env.Node, ...), and make sure its
// Runner execs iptables from the goroutine that calls it (os/exec does),
// not from a goroutine of its own.
func Exec(ns *Namespace, f func() error) error {
	if ns == nil || !ns.handle.IsOpen() {
		return errors.New("netnstest: Exec on a closed or nil namespace")
	}
	type outcome struct {
		err      error
		panicked bool
		value    any
	}
	done := make(chan outcome, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			done <- outcome{err: fmt.Errorf("netnstest: current namespace: %w", err)}
			return // thread stays locked and exits
		}
		defer orig.Close()
		if err := netns.Set(ns.handle); err != nil {
			done <- outcome{err: fmt.Errorf("netnstest: enter %s: %w", ns.Name, err)}
			return
		}
		finished := false
		defer func() {
			if finished {
				return
			}
			// f panicked or called runtime.Goexit; the thread stays
			// locked in ns and exits with this goroutine.
			if r := recover(); r != nil {
				done <- outcome{panicked: true, value: r}
				return
			}
			done <- outcome{err: errors.New("netnstest: f called runtime.Goexit (t.FailNow?) inside Exec")}
		}()
		ferr := f()
		finished = true
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		done <- outcome{err: ferr}
	}()
	o := <-done
	if o.panicked {
		panic(o.value)
	}
	return o.err
}

// writeSysctl writes value to /proc/sys/<path> inside ns ("net/ipv4/ip_forward").
func writeSysctl(ns *Namespace, path, value string) error {
	return Exec(ns, func() error {
		if err := os.WriteFile("/proc/sys/"+path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("netnstest: sysctl %s=%s in %s: %w", path, value, ns.Name, err)
		}
		return nil
	})
}

// removeStale deletes namespaces this package created in processes that no
// longer exist (a test binary killed before its cleanup ran). Namespaces
// of live processes, and names without NamePrefix, are never touched.
func removeStale() {
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), NamePrefix)
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pidStr); err == nil {
			continue // still running
		}
		_ = netns.DeleteNamed(e.Name())
	}
}

// Current reports whether the calling goroutine's thread is in ns (useful
// inside Exec, e.g. to assert an engine is being driven where it should be).
func (n *Namespace) Current() bool {
	cur, err := netns.Get()
	if err != nil {
		return false
	}
	defer cur.Close()
	return n.handle.IsOpen() && cur.Equal(n.handle)
}
