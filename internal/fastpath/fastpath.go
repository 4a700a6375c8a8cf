package fastpath

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// The environment variables of the two writers.
const (
	// EnvLegacyInProcess switches the iptables-legacy tables written from
	// the process (xtables' Runner on the legacy backend).
	EnvLegacyInProcess = "SVCPROXY_IPTABLES_LEGACY_IN_PROCESS"
	// EnvNFTablesNetlink switches the nftables engine's netlink writer.
	EnvNFTablesNetlink = "SVCPROXY_NFTABLES_NETLINK"
)

// Version is a dotted version, compared field by field (1.8.9 < 1.8.11).
type Version [3]int

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

// IsZero: unknown.
func (v Version) IsZero() bool { return v == Version{} }

var versionRE = regexp.MustCompile(`(\d+)\.(\d+)(?:\.(\d+))?`)

// ParseVersion finds the first dotted version in s ("v1.8.9 (legacy)",
// "nftables v1.0.6 (Lester Gooch #5)", "6.18.0-1-amd64"); ok is false
// when there is none.
func ParseVersion(s string) (Version, bool) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, false
	}
	var v Version
	for i := 0; i < 3; i++ {
		if m[i+1] != "" {
			v[i], _ = strconv.Atoi(m[i+1])
		}
	}
	return v, true
}

// Range is the tool and kernel versions a writer was verified on: tools
// from ToolMin to ToolMax (both included), kernels from KernelMin on.
type Range struct {
	// Writer names the writer in log lines.
	Writer string
	// Tool names the standard tool ("iptables-legacy", "nft").
	Tool             string
	ToolMin, ToolMax Version
	KernelMin        Version
	// Where says where the verification is recorded.
	Where string
}

// Verified ranges: what the kernel tests and the same-result checks have
// passed on: the development kernel 6.18 with iptables 1.8.9 and nft
// 1.0.6 (nft 0.9.8 to 1.1.3 listing what the netlink writer wrote), and
// the version matrix (hack/matrix.sh, README's table): its legacy
// same-result cells on kernel 6.1 with iptables 1.8.9 (bookworm) and 6.12
// with iptables 1.8.11 (trixie); the whole nftables cell with the netlink
// writer on, kernel 6.1 with nft 1.0.6 (bookworm, 85 passed), and the
// netlink same-result cell on 6.12 with nft 1.1.3 (trixie). Bullseye
// (5.10, iptables 1.8.7, nft 0.9.8) is below both: the encoder needs
// 1.8.9's rules and the nftables mode refuses that kernel.
var (
	LegacyInProcess = Range{
		Writer: "iptables-legacy tables written in process", Tool: "iptables-legacy",
		ToolMin: Version{1, 8, 9}, ToolMax: Version{1, 8, 11}, KernelMin: Version{6, 1, 0},
		Where: "internal/fastpath",
	}
	NFTablesNetlink = Range{
		Writer: "nftables rules written over netlink", Tool: "nft",
		ToolMin: Version{1, 0, 6}, ToolMax: Version{1, 1, 3}, KernelMin: Version{6, 1, 0},
		Where: "internal/fastpath",
	}
)

// Override is what an environment variable asks for.
type Override int

// The overrides.
const (
	Default Override = iota // unset: the versions decide
	Off
	On
)

// EnvOverride reads the variable name (an unknown value is Default, and
// reported in bad).
func EnvOverride(name string) (o Override, bad string) {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(name))); v {
	case "":
		return Default, ""
	case "0", "false", "off", "no":
		return Off, ""
	case "1", "true", "on", "yes":
		return On, ""
	default:
		return Default, v
	}
}

// Decide says whether the writer of r is on for the tool and kernel
// versions found (zero: unknown, which is outside the range) given the
// override, and why, in one line to log.
func Decide(r Range, tool, kernel Version, o Override, envName string) (on bool, why string) {
	switch o {
	case Off:
		return false, fmt.Sprintf("%s off: %s=0; %s writes", r.Writer, envName, r.Tool)
	case On:
		return true, fmt.Sprintf("%s on: %s=1 (tool %s, kernel %s)", r.Writer, envName, tool, kernel)
	}
	switch {
	case tool.IsZero():
		return false, fmt.Sprintf("%s off: the %s version is unknown; %s writes (%s=1 turns it on)", r.Writer, r.Tool, r.Tool, envName)
	case kernel.IsZero():
		return false, fmt.Sprintf("%s off: the kernel version is unknown; %s writes (%s=1 turns it on)", r.Writer, r.Tool, envName)
	case tool.Less(r.ToolMin) || r.ToolMax.Less(tool):
		return false, fmt.Sprintf("%s off: verified with %s %s to %s, this is %s; %s writes (%s=1 turns it on)",
			r.Writer, r.Tool, r.ToolMin, r.ToolMax, tool, r.Tool, envName)
	case kernel.Less(r.KernelMin):
		return false, fmt.Sprintf("%s off: verified on kernels from %s, this is %s; %s writes (%s=1 turns it on)",
			r.Writer, r.KernelMin, kernel, r.Tool, envName)
	}
	return true, fmt.Sprintf("%s on: %s %s and kernel %s are verified", r.Writer, r.Tool, tool, kernel)
}
