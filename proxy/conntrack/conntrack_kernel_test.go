//go:build linux

package conntrack

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// TestDeleteUDPKernel creates UDP conntrack entries over loopback in a
// network namespace of its own and deletes one of them (root only).
func TestDeleteUDPKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace and conntrack")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("needs iptables to enable conntrack in the namespace")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err)
		}
		ns.Close()
	}()
	// Bring up lo and make the kernel track connections in this namespace
	// (a nat table rule does).
	for _, args := range [][]string{{"ip", "link", "set", "lo", "up"}, {"iptables", "-t", "nat", "-A", "OUTPUT", "-p", "udp", "-j", "RETURN"},
		{"iptables", "-A", "OUTPUT", "-m", "conntrack", "--ctstate", "NEW", "-j", "ACCEPT"}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	for _, port := range []int{40001, 40002} {
		l, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	send := func(port int) {
		c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	send(40001)
	send(40002)
	if out, err := exec.Command("conntrack", "-L", "-p", "udp").CombinedOutput(); err == nil {
		t.Logf("conntrack -L:\n%s", out)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	n, err := New().DeleteUDP(false, []Filter{{OrigDst: lo, OrigDstPort: 40001}})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("deleted %d entries for port 40001, want 1", n)
	}
	// The other entry is still there: deleting it now finds exactly it.
	if n, err := New().DeleteUDP(false, []Filter{{OrigDstPort: 40002}}); err != nil || n != 1 {
		t.Fatalf("deleting port 40002: %d, %v; want 1 entry", n, err)
	}
}
