// Package fastpath decides, once per process, whether a writer that
// bypasses a standard tool (the iptables-legacy tables written from the
// process, internal/xtblob; the nftables rules sent over netlink) is on by
// default: only for the tool and kernel versions on which it was verified
// to leave the kernel state the standard tool leaves (Verified). Elsewhere
// the standard tool writes, and the caller logs the one line Decide
// returns.
//
// Each writer has one environment variable that overrides the default
// without a rebuild (EnvLegacyInProcess, EnvNFTablesNetlink): "0" (or
// "false", "off") turns the writer off, "1" (or "true", "on") turns it on
// outside the verified versions too (for testing another kernel); unset
// or empty leaves the decision to the versions. The engines' own switches
// (xtables.RunnerConfig.LegacyTool, nftables.Config.NFTOnly) turn a writer
// off whatever the variable says.
package fastpath
