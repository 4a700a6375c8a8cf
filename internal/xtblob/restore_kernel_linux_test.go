package xtblob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/memfd"
	"github.com/svcproxy/svcproxy/internal/netnstest"
)

func famName(f Family) string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

func tool(f Family, name string) string {
	if f == IPv6 {
		return "ip6" + name
	}
	return "ip" + name
}

// runTool runs iptables-legacy-restore --noflush (ip6tables-… for IPv6)
// on input in the current network namespace.
func runTool(t testing.TB, f Family, input string) error {
	t.Helper()
	cmd := exec.Command(tool(f, "tables-legacy-restore"), "--noflush", "-w", "5")
	in, err := memfd.File("xtblob-tool-input", []byte(input))
	if err != nil {
		return err
	}
	defer in.Close()
	cmd.Stdin = in
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// mustTool runs iptables-legacy (ip6tables-legacy) commands, one per line.
func mustTool(t testing.TB, f Family, lines string) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(lines), "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		cmd := exec.Command(tool(f, "tables-legacy"), append([]string{"-w", "5"}, tokens(l)...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v: %s", tool(f, "tables-legacy"), l, err, out)
		}
	}
}

// save is iptables-legacy-save of table, with counters, without its
// comment lines.
func save(t testing.TB, f Family, table string) string {
	t.Helper()
	out, err := exec.Command(tool(f, "tables-legacy-save"), "-c", "-t", table).Output()
	if err != nil {
		t.Fatalf("save %s: %v", table, err)
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(string(out), "\n") {
		if !strings.HasPrefix(l, "#") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// raw is a table as the kernel returns it: its info (hooks, underflows,
// entry count, size) then its entries, byte for byte.
func raw(t testing.TB, f Family, table string) []byte {
	t.Helper()
	r, err := RawForTest(f, table)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// state is every table's raw readback and save text.
type state map[string]string

func snapshot(t testing.TB, f Family, tables ...string) state {
	s := state{}
	for _, tb := range tables {
		s[tb+" raw"] = string(raw(t, f, tb))
		s[tb+" save"] = save(t, f, tb)
	}
	return s
}

func diffState(t testing.TB, what string, want, got state) {
	t.Helper()
	for k, w := range want {
		g := got[k]
		if g == w {
			continue
		}
		if strings.HasSuffix(k, " save") {
			t.Errorf("%s: %s differs:\nwant:\n%s\ngot:\n%s", what, k, w, g)
			continue
		}
		i := 0
		for i < len(w) && i < len(g) && w[i] == g[i] {
			i++
		}
		t.Errorf("%s: %s differs at byte %d (lengths %d, %d)", what, k, i, len(w), len(g))
	}
}

// testOpts asks for the policy counters of the iptables-legacy the tests
// compare with (1.8.10 and later keep them).
var testOpts = RestoreOptions{KeepPolicyCounters: toolKeepsPolicyCounters()}

func toolKeepsPolicyCounters() bool {
	out, err := exec.Command("iptables-legacy", "--version").Output()
	if err != nil {
		return false
	}
	var maj, min, patch int
	if _, err := fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(string(out)), "iptables v"), "%d.%d.%d", &maj, &min, &patch); err != nil {
		return false
	}
	return maj*10000+min*100+patch >= 10810
}

// foreign is what another program keeps in the tables: chains, jumps,
// gotos, rules with counters, a policy with counters.
const foreign = `
-t filter -N FOREIGN
-t filter -N FOREIGN-2
-t filter -A FOREIGN -s %[1]s -j ACCEPT -c 11 1100
-t filter -A FOREIGN -m comment --comment "theirs" -g FOREIGN-2 -c 12 1200
-t filter -A FOREIGN-2 -j DROP
-t filter -A FOREIGN-2 -c 3 300
-t filter -I INPUT -j FOREIGN -c 7 700
-t filter -A OUTPUT -d %[1]s -j RETURN
-t filter -P FORWARD DROP -c 5 500
-t nat -N ZZZ-FOREIGN
-t nat -A OUTPUT -j ZZZ-FOREIGN -c 9 900
-t nat -A ZZZ-FOREIGN -j MARK --set-xmark 0x1/0x1
`

func foreignFor(f Family) string {
	addr := "192.0.2.1"
	if f == IPv6 {
		addr = "2001:db8::1"
	}
	return fmt.Sprintf(foreign, addr)
}

func eachFamily(t *testing.T, f func(t *testing.T, fam Family)) {
	for _, fam := range []Family{IPv4, IPv6} {
		t.Run(famName(fam), func(t *testing.T) { f(t, fam) })
	}
}

func TestKernelRoundTrip(t *testing.T) {
	eachFamily(t, func(t *testing.T, fam Family) {
		netnstest.InFreshNetns(t, func() {
			mustTool(t, fam, foreignFor(fam))
			before := raw(t, fam, "filter")
			k, err := openKernel(fam)
			if err != nil {
				t.Fatal(err)
			}
			defer k.close()
			tb, err := k.readTable("filter")
			if err != nil {
				t.Fatal(err)
			}
			defer freeBig(tb.mem)
			if _, err := k.commit(tb); err != nil {
				t.Fatal(err)
			}
			after := raw(t, fam, "filter")
			// libiptc keeps every counter but the policies' (which it
			// resets to what they counted since the read): zero them in
			// what we expect.
			want := zeroPolicyCounters(t, fam, before)
			if !bytes.Equal(want, after) {
				t.Errorf("readback after our write differs from before")
			}
			if s := save(t, fam, "filter"); !strings.Contains(s, "[11:1100] -A FOREIGN") || !strings.Contains(s, ":FORWARD DROP [0:0]") {
				t.Errorf("counters not as libiptc keeps them:\n%s", s)
			}
		})
	})
}

// zeroPolicyCounters clears the counters of the built-in chains' policy
// entries (the underflows) in a raw readback.
func zeroPolicyCounters(t testing.TB, fam Family, r []byte) []byte {
	r = bytes.Clone(r)
	lay := &entryLayouts[fam]
	hooks := binary.NativeEndian.Uint32(r)
	const infoLen = 4 + 8*numHooks + 8
	for h := 0; h < numHooks; h++ {
		if hooks&(1<<h) == 0 {
			continue
		}
		uf := binary.NativeEndian.Uint32(r[4+8*h+4:])
		clear(r[infoLen+int(uf)+lay.countersAt : infoLen+int(uf)+lay.countersAt+16])
	}
	return r
}

func addrs(fam Family) (string, string) {
	if fam == IPv6 {
		return "2001:db8::7", "fd00::10"
	}
	return "10.0.0.7", "172.30.0.10"
}

func TestKernelSameResult(t *testing.T) {
	eachFamily(t, func(t *testing.T, fam Family) {
		a1, a2 := addrs(fam)
		for _, withForeign := range []bool{false, true} {
			t.Run(fmt.Sprintf("foreign=%v", withForeign), func(t *testing.T) {
				var want []state
				netnstest.InFreshNetns(t, func() {
					if withForeign {
						mustTool(t, fam, foreignFor(fam))
					}
					for i, p := range payloads {
						if !withForeign && i == 3 {
							break // -D FOREIGN 1 needs them
						}
						if err := runTool(t, fam, fill(p, a1, a2)); err != nil {
							t.Fatalf("payload %d by the tool: %v", i, err)
						}
						want = append(want, snapshot(t, fam, "filter", "nat"))
					}
				})
				netnstest.InFreshNetns(t, func() {
					if withForeign {
						mustTool(t, fam, foreignFor(fam))
					}
					for i := range want {
						if err := Restore(fam, []byte(fill(payloads[i], a1, a2)), testOpts); err != nil {
							t.Fatalf("payload %d by Restore: %v", i, err)
						}
						diffState(t, fmt.Sprintf("payload %d", i), want[i], snapshot(t, fam, "filter", "nat"))
					}
				})
			})
		}
	})
}

func TestKernelErrors(t *testing.T) {
	cases := []struct {
		name, input string
		line        int
		unsupported bool
	}{
		{"delete a referenced chain", "*filter\n:KUBE-A - [0:0]\n-X FOREIGN-2\nCOMMIT\n", 3, false},
		{"delete a chain with rules", "*filter\n-X FOREIGN\nCOMMIT\n", 2, false},
		{"delete a built-in chain", "*filter\n-X INPUT\nCOMMIT\n", 2, false},
		{"append to a missing chain", "*filter\n-A NOPE -j ACCEPT\nCOMMIT\n", 2, false},
		{"jump to a missing chain", "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-NOPE\nCOMMIT\n", 3, false},
		{"jump to a built-in chain", "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j INPUT\nCOMMIT\n", 3, true},
		{"DROP in nat", "*nat\n:KUBE-X - [0:0]\n-A KUBE-X -j DROP\nCOMMIT\n", 3, false},
		{"a bad rule", "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -p tcp -m tcp --dport 70000 -j ACCEPT\nCOMMIT\n", 3, false},
		{"new chain that exists", "*filter\n-N FOREIGN\nCOMMIT\n", 2, false},
		{"bad policy", "*filter\n:INPUT REJECT [0:0]\nCOMMIT\n", 2, false},
		{"policy of a user chain", "*filter\n:KUBE-A ACCEPT [0:0]\nCOMMIT\n", 2, false},
		{"insert past the end", "*filter\n-I FOREIGN-2 4 -j ACCEPT\nCOMMIT\n", 2, false},
		{"delete a missing rule", "*filter\n-D FOREIGN -j DROP\nCOMMIT\n", 2, false},
		{"-o in INPUT", "*filter\n-A INPUT -o eth0 -j ACCEPT\nCOMMIT\n", 2, false},
		{"-i in OUTPUT", "*filter\n:KUBE-A - [0:0]\n-I OUTPUT 1 -i eth0 -j KUBE-A\nCOMMIT\n", 3, false},
		{"rule number 0", "*filter\n-D FOREIGN 0\nCOMMIT\n", 2, false},
		{"rule number a word", "*filter\n-R FOREIGN one -j ACCEPT\nCOMMIT\n", 2, false},
		{"octal rule number", "*filter\n-D FOREIGN 01\nCOMMIT\n", 2, true},
		{"no COMMIT", "*filter\n:KUBE-A - [0:0]\n", 3, false},
		{"a missing table", "*nope\nCOMMIT\n", 1, false},
		{"second table fails", "*nat\n:KUBE-X - [0:0]\nCOMMIT\n*filter\n-X FOREIGN\nCOMMIT\n", 5, false},
		{"unsupported command", "*nat\n:KUBE-X - [0:0]\nCOMMIT\n*filter\n:KUBE-A - [0:0]\n-E FOREIGN BAR\nCOMMIT\n", 6, true},
		{"unsupported match", "*nat\n:KUBE-X - [0:0]\nCOMMIT\n*filter\n-X FOREIGN\n-A INPUT -m owner --uid-owner 0 -j ACCEPT\nCOMMIT\n", 6, true},
	}
	eachFamily(t, func(t *testing.T, fam Family) {
		netnstest.InFreshNetns(t, func() {
			mustTool(t, fam, foreignFor(fam))
			before := snapshot(t, fam, "filter", "nat")
			for _, c := range cases {
				err := Restore(fam, []byte(c.input), testOpts)
				var re *RestoreError
				switch {
				case !errors.As(err, &re):
					t.Errorf("%s: got %v, want a *RestoreError", c.name, err)
				case re.Line != c.line:
					t.Errorf("%s: error %q names line %d, want %d", c.name, err, re.Line, c.line)
				case errors.Is(err, ErrUnsupported) != c.unsupported:
					t.Errorf("%s: error %q: unsupported=%v, want %v", c.name, err, !c.unsupported, c.unsupported)
				}
				diffState(t, c.name, before, snapshot(t, fam, "filter", "nat"))
				// the tool fails too
				if terr := runTool(t, fam, c.input); terr == nil && !c.unsupported {
					t.Errorf("%s: the tool took it", c.name)
				}
				// the tool may have committed a table before failing (or
				// taken what we do not)
				{
					mustTool(t, fam, "-t nat -F\n-t nat -X\n-t filter -F\n-t filter -X\n-t filter -P FORWARD ACCEPT")
					mustTool(t, fam, foreignFor(fam))
					before = snapshot(t, fam, "filter", "nat")
				}
			}
		})
	})
}

func TestKernelLock(t *testing.T) {
	netnstest.InFreshNetns(t, func() {
		path := t.TempDir() + "/xtables.lock"
		opts := testOpts
		opts.LockFile = path
		opts.LockWait = 200 * 1e6
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := flockForTest(f); err != nil {
			t.Fatal(err)
		}
		in := []byte("*filter\n:KUBE-A - [0:0]\nCOMMIT\n")
		err = Restore(IPv4, in, opts)
		if !errors.Is(err, ErrLockHeld) {
			t.Fatalf("with the lock held: %v, want ErrLockHeld", err)
		}
		if s := save(t, IPv4, "filter"); strings.Contains(s, "KUBE-A") {
			t.Fatalf("written without the lock:\n%s", s)
		}
		f.Close()
		if err := Restore(IPv4, in, opts); err != nil {
			t.Fatalf("after release: %v", err)
		}
		if s := save(t, IPv4, "filter"); !strings.Contains(s, ":KUBE-A") {
			t.Fatalf("not written:\n%s", s)
		}
	})
}

// tokens splits a rule as iptables-restore does (double quotes group).
func tokens(s string) []string {
	var out []string
	var cur strings.Builder
	in, any := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			in, any = !in, true
		case !in && (c == ' ' || c == '\t'):
			if any {
				out = append(out, cur.String())
				cur.Reset()
				any = false
			}
		default:
			cur.WriteByte(c)
			any = true
		}
	}
	if any {
		out = append(out, cur.String())
	}
	return out
}

// TestKernelGoldens applies the iptables engine's golden payloads
// (iptables/testdata), one after the other, with the tool in one network
// namespace and with Restore in another: the tables must be the same,
// byte for byte, after each.
func TestKernelGoldens(t *testing.T) {
	files, err := filepath.Glob("../../iptables/testdata/*.golden")
	if err != nil || len(files) == 0 {
		t.Fatalf("goldens: %v", err)
	}
	eachFamily(t, func(t *testing.T, fam Family) {
		var inputs []string
		for _, f := range files {
			if strings.Contains(filepath.Base(f), "ipv6") != (fam == IPv6) {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			inputs = append(inputs, string(b))
		}
		tables := []string{"filter", "nat", "mangle"}
		var want []state
		netnstest.InFreshNetns(t, func() {
			for i, in := range inputs {
				if err := runTool(t, fam, in); err != nil {
					t.Fatalf("golden %d by the tool: %v", i, err)
				}
				want = append(want, snapshot(t, fam, tables...))
			}
		})
		netnstest.InFreshNetns(t, func() {
			for i, in := range inputs {
				err := Restore(fam, []byte(in), RestoreOptions{})
				if errors.Is(err, ErrUnsupported) {
					t.Logf("golden %d: %v; the tool instead", i, err)
					err = runTool(t, fam, in)
				}
				if err != nil {
					t.Fatalf("golden %d: %v", i, err)
				}
				diffState(t, fmt.Sprintf("golden %d", i), want[i], snapshot(t, fam, tables...))
			}
		})
	})
}

// deletes turns every -A line of a restore input into a -D of the same
// rule, keeping the table sections.
func deletes(in string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(in, "\n") {
		switch {
		case strings.HasPrefix(l, "*"), strings.HasPrefix(l, "COMMIT"):
			b.WriteString(l)
		case strings.HasPrefix(l, "-A "):
			b.WriteString("-D " + l[3:])
		}
	}
	return b.String()
}

// TestKernelDeleteGoldens deletes every rule of each golden payload by
// its text (-D CHAIN rule), with the tool and with Restore: each rule
// must be found as libiptc finds it (whatever the kernel keeps of its
// extensions), and the tables end the same.
func TestKernelDeleteGoldens(t *testing.T) {
	files, err := filepath.Glob("../../iptables/testdata/*.golden")
	if err != nil || len(files) == 0 {
		t.Fatalf("goldens: %v", err)
	}
	tables := []string{"filter", "nat", "mangle"}
	for _, f := range files {
		fam := IPv4
		if strings.Contains(filepath.Base(f), "ipv6") {
			fam = IPv6
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		in := string(b)
		t.Run(filepath.Base(f), func(t *testing.T) {
			var want state
			netnstest.InFreshNetns(t, func() {
				if err := runTool(t, fam, in); err != nil {
					t.Fatal(err)
				}
				if err := runTool(t, fam, deletes(in)); err != nil {
					t.Fatalf("deletes by the tool: %v", err)
				}
				want = snapshot(t, fam, tables...)
			})
			if n := strings.Count(deletes(in), "\n-D "); n < 10 || strings.Contains(want["nat save"], "\n[0:0] -A ") {
				t.Fatalf("%d deletes, left:\n%s", n, want["nat save"])
			}
			netnstest.InFreshNetns(t, func() {
				if err := runTool(t, fam, in); err != nil {
					t.Fatal(err)
				}
				if err := Restore(fam, []byte(deletes(in)), RestoreOptions{}); err != nil {
					t.Fatalf("deletes by Restore: %v", err)
				}
				diffState(t, "after the deletes", want, snapshot(t, fam, tables...))
			})
		})
	}
}

// TestKernelChangedUnderneath has another writer (one that ignores the
// xtables lock) change a table between Restore's read and its replace:
// the kernel refuses the replace (EAGAIN), and Restore reads the table
// again and applies its input over the other writer's change, as the
// tool run after it would.
func TestKernelChangedUnderneath(t *testing.T) {
	a1, a2 := addrs(IPv4)
	in := fill(payloads[1], a1, a2)
	intrude := func() {
		cmd := exec.Command("iptables-legacy", "-w", "5", "-t", "filter", "-N", "INTRUDER")
		cmd.Env = append(os.Environ(), "XTABLES_LOCKFILE="+t.TempDir()+"/other.lock")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	var want state
	netnstest.InFreshNetns(t, func() {
		intrude()
		if err := runTool(t, IPv4, in); err != nil {
			t.Fatal(err)
		}
		want = snapshot(t, IPv4, "filter", "nat")
	})
	netnstest.InFreshNetns(t, func() {
		opts := RestoreOptions{}
		done := false
		opts.beforeCommit = func(table string) {
			if table == "filter" && !done {
				done = true
				intrude()
			}
		}
		if err := Restore(IPv4, []byte(in), opts); err != nil {
			t.Fatal(err)
		}
		if !done {
			t.Fatal("the filter table was not written")
		}
		diffState(t, "after a change underneath", want, snapshot(t, IPv4, "filter", "nat"))
	})
}

// A -m set rule (the ipvs engine's) is written in process, with the set's
// index asked for in the caller's network namespace, and leaves what the
// tool leaves; a rule naming a set that does not exist goes to the tool
// (ErrUnsupported), which reports it.
func TestKernelMatchSet(t *testing.T) {
	if _, err := exec.LookPath("ipset"); err != nil {
		t.Skipf("needs ipset: %v", err)
	}
	eachFamily(t, func(t *testing.T, fam Family) {
		family := "inet"
		if fam == IPv6 {
			family = "inet6"
		}
		input := "*nat\n:KUBE-A - [0:0]\n" +
			"-A KUBE-A -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP src,dst -j ACCEPT\n" +
			"-A KUBE-A -m set ! --match-set KUBE-LOOP-BACK dst,dst,src -j RETURN\n" +
			"COMMIT\n"
		var want state
		for i, inProcess := range []bool{false, true} {
			netnstest.InFreshNetns(t, func() {
				// Created in another order on each side: the indexes differ
				// unless each side asks its own kernel.
				sets := []string{"KUBE-CLUSTER-IP hash:ip,port", "KUBE-LOOP-BACK hash:ip,port,ip"}
				if i == 1 {
					sets[0], sets[1] = sets[1], sets[0]
					if out, err := exec.Command("ipset", "create", "KUBE-OTHER", "hash:ip", "family", family).CombinedOutput(); err != nil {
						t.Fatalf("ipset create: %v: %s", err, out)
					}
				}
				for _, s := range sets {
					args := append([]string{"create"}, strings.Fields(s)...)
					if out, err := exec.Command("ipset", append(args, "family", family)...).CombinedOutput(); err != nil {
						t.Fatalf("ipset %v: %v: %s", args, err, out)
					}
				}
				if !inProcess {
					if err := runTool(t, fam, input); err != nil {
						t.Fatal(err)
					}
					want = snapshot(t, fam, "nat")
					return
				}
				if err := Restore(fam, []byte(input), testOpts); err != nil {
					t.Fatalf("Restore of -m set rules: %v", err)
				}
				got := snapshot(t, fam, "nat")
				if got["nat save"] != want["nat save"] {
					t.Errorf("-m set: save differs from the tool's in a namespace of its own:\nwant:\n%s\ngot:\n%s", want["nat save"], got["nat save"])
				}
				// The tool, over the same input in this namespace (":KUBE-A"
				// flushes), must leave the very bytes: the indexes are this
				// namespace's, not the first one's.
				if err := runTool(t, fam, input); err != nil {
					t.Fatal(err)
				}
				diffState(t, "-m set, then the tool in the same namespace", snapshot(t, fam, "nat"), got)
				missing := "*nat\n-A KUBE-A -m set --match-set KUBE-NONE dst -j ACCEPT\nCOMMIT\n"
				if err := Restore(fam, []byte(missing), testOpts); !errors.Is(err, ErrUnsupported) {
					t.Errorf("Restore naming a missing set = %v, want ErrUnsupported", err)
				}
			})
		}
	})
}

// partialInput writes a chain to filter, then a loop of jumps to nat,
// which the kernel refuses (ELOOP) after filter was replaced.
const partialInput = "*filter\n:KUBE-PARTIAL-A - [0:0]\n-A KUBE-PARTIAL-A -j ACCEPT\nCOMMIT\n" +
	"*nat\n:KUBE-PARTIAL-L1 - [0:0]\n:KUBE-PARTIAL-L2 - [0:0]\n-A OUTPUT -j KUBE-PARTIAL-L1\n" +
	"-A KUBE-PARTIAL-L1 -j KUBE-PARTIAL-L2\n-A KUBE-PARTIAL-L2 -j KUBE-PARTIAL-L1\nCOMMIT\n"

// TestKernelPartialCommit: a table the kernel refuses after an earlier
// table of the same input was replaced is a *PartialError naming the
// tables written (errors.Is ErrPartial), and the kernel holds the first
// table's part and none of the second's.
func TestKernelPartialCommit(t *testing.T) {
	netnstest.InFreshNetns(t, func() {
		err := Restore(IPv4, []byte(partialInput), testOpts)
		var pe *PartialError
		if !errors.As(err, &pe) || !errors.Is(err, ErrPartial) {
			t.Fatalf("Restore of a refused second table = %v, want a *PartialError", err)
		}
		if len(pe.Written) != 1 || pe.Written[0] != "filter" {
			t.Errorf("Written = %q, want [filter]", pe.Written)
		}
		got := snapshot(t, IPv4, "filter", "nat")
		if !strings.Contains(got["filter save"], "-A KUBE-PARTIAL-A -j ACCEPT") {
			t.Errorf("filter lacks the part written:\n%s", got["filter save"])
		}
		if strings.Contains(got["nat save"], "KUBE-PARTIAL-L1") {
			t.Errorf("nat holds the refused part:\n%s", got["nat save"])
		}
		// Refused as a whole first table: nothing written, no PartialError.
		err = Restore(IPv4, []byte(partialInput[strings.Index(partialInput, "*nat"):]), testOpts)
		if err == nil || errors.Is(err, ErrPartial) {
			t.Errorf("Restore of the refused table alone = %v, want a plain error", err)
		}
	})
}
