//go:build linux

package ipvskernel

import (
	"fmt"
	"github.com/svcproxy/svcproxy/ipvs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

const (
	ipvsCmdGetInfo         = 15 // IPVS_CMD_GET_INFO
	ipvsInfoAttrVersion    = 1  // IPVS_INFO_ATTR_VERSION
	ipvsInfoAttrConnTabSiz = 2  // IPVS_INFO_ATTR_CONN_TAB_SIZE
)

// Probe asks the kernel of the calling thread's network namespace whether
// it can do IPVS: it resolves the "IPVS" generic netlink family (which makes
// the kernel load ip_vs if it can), sends IPVS_CMD_GET_INFO, checks ipset
// over netfilter netlink, and lists the schedulers found under /sys/module
// and the kernel's module directory. It never returns an error: a missing
// piece is reported in Reason.
func Probe(opts ProbeOptions) ProbeResult {
	var r ProbeResult
	if opts.SysRoot == "" {
		opts.SysRoot = "/sys"
	}
	if opts.ModulesRoot == "" {
		var u unix.Utsname
		if err := unix.Uname(&u); err == nil {
			opts.ModulesRoot = filepath.Join("/lib/modules", unix.ByteSliceToString(u.Release[:]))
		}
	}
	fam, err := netlink.GenlFamilyGet("IPVS")
	if err != nil {
		r.Reason = fmt.Errorf("generic netlink family IPVS: %w (is ip_vs loaded?)", err)
		return r
	}
	req := nl.NewNetlinkRequest(int(fam.ID), 0)
	req.AddData(&nl.Genlmsg{Command: ipvsCmdGetInfo, Version: 1})
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil || len(msgs) == 0 || len(msgs[0]) < 4 {
		r.Reason = fmt.Errorf("IPVS GET_INFO: %v", err)
		return r
	}
	attrs, err := nl.ParseRouteAttr(msgs[0][4:])
	if err != nil {
		r.Reason = fmt.Errorf("IPVS GET_INFO reply: %w", err)
		return r
	}
	for _, a := range attrs {
		switch a.Attr.Type {
		case ipvsInfoAttrVersion:
			if len(a.Value) >= 4 {
				v := nl.NativeEndian().Uint32(a.Value)
				r.Version = fmt.Sprintf("%d.%d.%d", v>>16, (v>>8)&0xff, v&0xff)
			}
		case ipvsInfoAttrConnTabSiz:
			if len(a.Value) >= 4 {
				r.ConnTableSize = int(nl.NativeEndian().Uint32(a.Value))
			}
		}
	}
	r.Available = true
	r.Schedulers = schedulers(opts)
	if _, _, err := netlink.IpsetProtocol(); err != nil {
		r.Reason = fmt.Errorf("ipset netlink: %w", err)
	} else {
		r.IPSet = true
	}
	return r
}

func schedulers(opts ProbeOptions) []string {
	var shipped string
	for _, f := range []string{"modules.dep", "modules.builtin"} {
		if b, err := os.ReadFile(filepath.Join(opts.ModulesRoot, f)); err == nil {
			shipped += string(b)
		}
	}
	var out []string
	for _, s := range ipvs.AllSchedulers {
		mod := "ip_vs_" + s
		if _, err := os.Stat(filepath.Join(opts.SysRoot, "module", mod)); err == nil ||
			strings.Contains(shipped, "/"+mod+".ko") {
			out = append(out, s)
		}
	}
	return out
}
