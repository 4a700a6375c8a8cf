package xtblob

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// listings is iptables-legacy-save -t of each table of input (what the
// Runner's self-check hands Verify).
func listings(t *testing.T, fam Family, input string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, l := range strings.Split(input, "\n") {
		if strings.HasPrefix(l, "*") {
			b, err := exec.Command(tool(fam, "tables-legacy-save"), "-t", l[1:]).Output()
			if err != nil {
				t.Fatal(err)
			}
			out[l[1:]] = b
		}
	}
	return out
}

// recentInput has the forms whose listing does not round-trip byte for
// byte in iptables itself (recent's IPv4 mask) beside statistic and sctp.
const recentInput = "*nat\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-B - [0:0]\n" +
	"-A KUBE-SVC-A -m comment --comment \"ns/a:p -> %[1]s:8080\" -m recent --name KUBE-SEP-B --rcheck --seconds 5357 --reap -j KUBE-SEP-B\n" +
	"-A KUBE-SVC-A -m comment --comment x -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-B\n" +
	"-A KUBE-SEP-B -m comment --comment ns/a:p -s %[1]s -j KUBE-MARK-MASQ\n" +
	"-A KUBE-SEP-B -m comment --comment ns/a:p -m recent --name KUBE-SEP-B --set -m sctp -p sctp -j DNAT --to-destination %[2]s\n" +
	"COMMIT\n"

// Verify finds what Restore wrote, on both families and for every payload
// of the fuzz corpus and the recent/statistic/sctp forms; a rule changed
// behind the writer is a *MismatchError ("as the input wrote it"), and so
// is a listing that differs ("as the tool lists it").
func TestKernelVerify(t *testing.T) {
	eachFamily(t, func(t *testing.T, fam Family) {
		a1, a2 := addrs(fam)
		dnat := "10.1.4.1:8080"
		if fam == IPv6 {
			dnat = "[fd00::10]:8080"
		}
		inputs := []string{strings.NewReplacer("%[1]s", a1, "%[2]s", dnat).Replace(recentInput)}
		for _, p := range payloads {
			inputs = append(inputs, fill(p, a1, a2))
		}
		for i, in := range inputs {
			netnstest.InFreshNetns(t, func() {
				if err := Restore(fam, []byte(in), testOpts); err != nil {
					return // the corpus has inputs the kernel refuses
				}
				if err := Verify(fam, []byte(in), listings(t, fam, in), testOpts); err != nil {
					t.Errorf("input %d: Verify after Restore: %v\n%s", i, err, in)
				}
			})
		}
		netnstest.InFreshNetns(t, func() {
			in := inputs[0]
			if err := Restore(fam, []byte(in), testOpts); err != nil {
				t.Fatal(err)
			}
			l := listings(t, fam, in)
			l["nat"] = []byte(strings.Replace(string(l["nat"]), "--probability 0.33333333349", "--probability 0.5", 1))
			err := Verify(fam, []byte(in), l, testOpts)
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "KUBE-SVC-A: rule 2 differs (as the tool lists it)") {
				t.Errorf("Verify with a listing that differs = %v", err)
			}
			mustTool(t, fam, "-t nat -R KUBE-SEP-B 1 -j RETURN")
			err = Verify(fam, []byte(in), listings(t, fam, in), testOpts)
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "KUBE-SEP-B: rule 1 differs (as the input wrote it)") {
				t.Errorf("Verify after a rule was replaced behind the writer = %v", err)
			}
		})
	})
}
