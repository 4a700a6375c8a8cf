//go:build linux

// Command nftshapes measures how costly different nftables table shapes are
// for the kernel to load, on a synthetic cluster of N services with E
// endpoints each. It writes `nft -f` input files for four shapes of the
// per-service endpoint dispatch and, with -run, loads them in fresh network
// namespaces, timing each nft child's wall time and its user and system CPU
// (from the child's rusage; the system part is mostly the kernel's work).
//
// Every shape's table holds a verdict map service-ips (cluster IP . proto .
// port : goto svc-I), one chain svc-I per service and a nat prerouting base
// chain looking the map up. The chains differ:
//
//	rules    one rule per endpoint: numgen random mod (E-j) 0 ... dnat to A:80
//	inline   one rule, dnat ip to numgen random mod E map { 0 : A0 . 80, ... }
//	         (upstream kube-proxy v1.37's shape)
//	sharded  one rule, dnat ip to numgen random mod E offset I<<12 map
//	         @service-endpoints-K, the endpoints being elements of one of
//	         -shards named data maps
//	permap   one rule, dnat ip to numgen random mod E offset 0 map @ep-I,
//	         a named data map per service
//
// For each shape it writes DIR/SHAPE-N.nft (the cold load), DIR/SHAPE-N-partial.nft
// (every 100th service's endpoint 3 moves to a new address: flush chain and
// re-add rules for rules/inline, delete and add one element for
// sharded/permap) and DIR/SHAPE-N-restore.nft (the same change back).
//
// Usage:
//
//	go run ./hack/nftshapes -out DIR [-services N] [-endpoints E] [-shards S]
//	go run ./hack/nftshapes -out DIR -run [-rounds R] [-shapes rules,inline,...]
//
// With -run (root only) each round, for each shape in turn, creates a fresh
// netns, loads the cold, partial and restore files with
// `ip netns exec NS nft -f FILE`, times `nft -j list chain ip kube-proxy svc-7`,
// deletes the netns (also on error) and prints one line: wall, user and sys
// seconds of each step, the child being `ip netns exec` (which execs nft; its
// own namespace switch is included). The host's own network namespace is never
// touched. -out defaults to $TMPDIR/nftshapes. To list one chain nft 1.0.6
// dumps every set, so list grows with the sets (inline's anonymous maps,
// permap's named maps): seconds at 10,000 services.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

var allShapes = []string{"rules", "inline", "sharded", "permap"}

// cluster is the synthetic cluster: n services of e endpoints, s shards.
type cluster struct{ n, e, s int }

func cip(i int) string { return fmt.Sprintf("172.30.%d.%d", i>>8, i&255) }

// addr is endpoint j of service i's address in generation g.
func (c cluster) addr(i, j, g int) string {
	x := i*c.e + j + g*7919
	return fmt.Sprintf("10.%d.%d.%d", 64+(x>>16)%64, (x>>8)&255, x&255)
}

// gen is endpoint j of service i's generation in a file whose changed
// endpoints are at generation g: every 100th service's endpoint 3 changes.
func gen(i, j, g int) int {
	if i%100 == 0 && j == 3 {
		return g
	}
	return 0
}

// epMap is the named map holding service i's endpoints and their key offset.
func (c cluster) epMap(shape string, i int) (string, int) {
	if shape == "permap" {
		return fmt.Sprintf("ep-%d", i), 0
	}
	k := uint32(i) * 2654435761 % uint32(c.s)
	return fmt.Sprintf("service-endpoints-%d", k), i << 12
}

// rules is service i's chain content for shapes rules and inline.
func (c cluster) rules(shape string, i, g int) []string {
	if shape == "inline" {
		return []string{fmt.Sprintf("meta l4proto tcp dnat ip to numgen random mod %d map { %s }", c.e, c.elements(i, 0, g))}
	}
	var rs []string
	for j := 0; j < c.e; j++ {
		prefix := ""
		if j < c.e-1 {
			prefix = fmt.Sprintf("numgen random mod %d 0 ", c.e-j)
		}
		rs = append(rs, fmt.Sprintf("%smeta l4proto tcp dnat to %s:80", prefix, c.addr(i, j, gen(i, j, g))))
	}
	return rs
}

// elements is service i's endpoints as map elements with keys from off.
func (c cluster) elements(i, off, g int) string {
	var els []string
	for j := 0; j < c.e; j++ {
		els = append(els, fmt.Sprintf("%d : %s . 80", off+j, c.addr(i, j, gen(i, j, g))))
	}
	return strings.Join(els, ", ")
}

func (c cluster) writeCold(w *bytes.Buffer, shape string) {
	named := shape == "sharded" || shape == "permap"
	fmt.Fprintln(w, "table ip kube-proxy {")
	fmt.Fprintln(w, "\tmap service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }")
	if shape == "sharded" {
		for k := 0; k < c.s; k++ {
			fmt.Fprintf(w, "\tmap service-endpoints-%d { typeof numgen random mod 1 : ip daddr . tcp dport ; }\n", k)
		}
	}
	for i := 0; i < c.n; i++ {
		if shape == "permap" {
			fmt.Fprintf(w, "\tmap ep-%d { typeof numgen random mod 1 : ip daddr . tcp dport ; }\n", i)
		}
		fmt.Fprintf(w, "\tchain svc-%d {\n", i)
		if named {
			m, off := c.epMap(shape, i)
			fmt.Fprintf(w, "\t\tmeta l4proto tcp dnat ip to numgen random mod %d offset %d map @%s\n", c.e, off, m)
		} else {
			for _, r := range c.rules(shape, i, 0) {
				fmt.Fprintf(w, "\t\t%s\n", r)
			}
		}
		fmt.Fprintln(w, "\t}")
	}
	fmt.Fprintln(w, "\tchain nat-prerouting { type nat hook prerouting priority dstnat; ip daddr . meta l4proto . th dport vmap @service-ips ; }")
	fmt.Fprintln(w, "}")
	for i := 0; i < c.n; i++ {
		fmt.Fprintf(w, "add element ip kube-proxy service-ips { %s . tcp . 80 : goto svc-%d }\n", cip(i), i)
	}
	if named {
		for i := 0; i < c.n; i++ {
			m, off := c.epMap(shape, i)
			fmt.Fprintf(w, "add element ip kube-proxy %s { %s }\n", m, c.elements(i, off, 0))
		}
	}
}

// writeChange writes the partial file (g=1) or the restore file (g=0).
func (c cluster) writeChange(w *bytes.Buffer, shape string, g int) {
	for i := 0; i < c.n; i += 100 {
		if shape == "rules" || shape == "inline" {
			fmt.Fprintf(w, "flush chain ip kube-proxy svc-%d\n", i)
			for _, r := range c.rules(shape, i, g) {
				fmt.Fprintf(w, "add rule ip kube-proxy svc-%d %s\n", i, r)
			}
			continue
		}
		m, off := c.epMap(shape, i)
		fmt.Fprintf(w, "delete element ip kube-proxy %s { %d }\n", m, off+3)
		fmt.Fprintf(w, "add element ip kube-proxy %s { %d : %s . 80 }\n", m, off+3, c.addr(i, 3, g))
	}
}

// cost is one child's wall time and CPU.
type cost struct{ wall, user, sys time.Duration }

func (c cost) String() string {
	return fmt.Sprintf("%.3f %.3f %.3f", c.wall.Seconds(), c.user.Seconds(), c.sys.Seconds())
}

func timed(args ...string) (cost, error) {
	cmd := exec.Command(args[0], args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		msg := stderr.String()
		if len(msg) > 2000 {
			msg = msg[:2000] + "..."
		}
		return cost{}, fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return cost{wall, time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}, nil
}

// measure loads one shape's files in a fresh netns: cold, partial, restore, list.
func measure(ns string, files []string) (costs []cost, err error) {
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", ns, err, out)
	}
	defer func() {
		if out, derr := exec.Command("ip", "netns", "del", ns).CombinedOutput(); derr != nil && err == nil {
			err = fmt.Errorf("ip netns del %s: %v: %s", ns, derr, out)
		}
	}()
	for _, f := range append(files, "") {
		args := []string{"ip", "netns", "exec", ns, "nft", "-f", f}
		if f == "" {
			args = []string{"ip", "netns", "exec", ns, "nft", "-j", "list", "chain", "ip", "kube-proxy", "svc-7"}
		}
		c, err := timed(args...)
		if err != nil {
			return nil, err
		}
		costs = append(costs, c)
	}
	return costs, nil
}

func main() {
	out := flag.String("out", filepath.Join(os.TempDir(), "nftshapes"), "directory for the .nft files")
	n := flag.Int("services", 1000, "number of services (8..65536)")
	e := flag.Int("endpoints", 10, "endpoints per service (4..4096)")
	s := flag.Int("shards", 64, "number of endpoint maps in shape sharded")
	shapes := flag.String("shapes", strings.Join(allShapes, ","), "comma-separated shapes: "+strings.Join(allShapes, ","))
	run := flag.Bool("run", false, "load the files in fresh network namespaces and time nft (root only)")
	rounds := flag.Int("rounds", 3, "rounds with -run")
	flag.Parse()

	fail := func(err error) { fmt.Fprintln(os.Stderr, "nftshapes:", err); os.Exit(1) }
	if *n < 8 || *n > 65536 || *e < 4 || *e > 4096 || *s < 1 {
		fail(fmt.Errorf("need 8 <= -services <= 65536, 4 <= -endpoints <= 4096, -shards >= 1"))
	}
	sel := strings.Split(*shapes, ",")
	for _, sh := range sel {
		if !slices.Contains(allShapes, sh) {
			fail(fmt.Errorf("unknown shape %q", sh))
		}
	}
	if *run && os.Geteuid() != 0 {
		fail(fmt.Errorf("-run needs root"))
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}

	c := cluster{*n, *e, *s}
	files := map[string][]string{}
	for _, sh := range allShapes {
		base := filepath.Join(*out, fmt.Sprintf("%s-%d", sh, c.n))
		fs := []string{base + ".nft", base + "-partial.nft", base + "-restore.nft"}
		for k, f := range fs {
			var b bytes.Buffer
			if k == 0 {
				c.writeCold(&b, sh)
			} else {
				c.writeChange(&b, sh, 2-k) // partial: generation 1, restore: 0
			}
			if err := os.WriteFile(f, b.Bytes(), 0o644); err != nil {
				fail(err)
			}
		}
		files[sh] = fs
		fmt.Println("wrote", strings.Join(fs, " "))
	}
	if !*run {
		return
	}

	fmt.Println("round shape services | cold wall user sys | partial wall user sys | restore wall user sys | list wall user sys (seconds)")
	for r := 1; r <= *rounds; r++ {
		for _, sh := range sel {
			costs, err := measure(fmt.Sprintf("nftshapes-%d-%s", os.Getpid(), sh), files[sh])
			if err != nil {
				fail(fmt.Errorf("%s: %v", sh, err))
			}
			fmt.Printf("%d %-7s %d | cold %v | partial %v | restore %v | list %v\n", r, sh, c.n, costs[0], costs[1], costs[2], costs[3])
		}
	}
}
