package svcproxy_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestKitsImportNoOtherEngine: a driver's test kit imports no engine, and
// an engine's test kit no other engine, so a test of the ipvs or userspace
// engine (or an embedder's test that only needs the iptables fake) does
// not build the iptables engine. They share the xtables.Runner fake
// through iptables/xtables/xtablestest, beside the driver. go list -deps
// of a package leaves out its _test files: this sees what the kits link.
func TestKitsImportNoOtherEngine(t *testing.T) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH (%v): cannot list the kits' dependencies", err)
	}
	const mod = "github.com/svcproxy/svcproxy/"
	engines := []string{"iptables", "ipvs", "nftables", "userspace", "winkernel"}
	for kit, own := range map[string]string{
		"iptables/xtables/xtablestest": "",
		"ipvs/ipvstest":                "ipvs",
		"userspace/userspacetest":      "userspace",
	} {
		for _, goos := range []string{"linux", "windows"} {
			cmd := exec.Command(gotool, "list", "-deps", "./"+kit)
			cmd.Env = append(cmd.Environ(), "GOOS="+goos)
			out, err := cmd.Output()
			if err != nil {
				var stderr string
				if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
					stderr = string(ee.Stderr)
				}
				t.Fatalf("GOOS=%s go list -deps ./%s: %v\n%s", goos, kit, err, stderr)
			}
			deps := strings.Fields(string(out))
			for _, e := range engines {
				if e != own && slices.Contains(deps, mod+e) {
					t.Errorf("GOOS=%s: %s imports the %s engine (%s%s)", goos, kit, e, mod, e)
				}
			}
		}
	}
}
