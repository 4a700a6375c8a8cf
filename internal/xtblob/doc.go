// Package xtblob writes iptables-legacy (x_tables) tables from the process
// itself, without iptables-legacy-restore.
//
// iptables-legacy-restore spends most of a large restore in user space:
// libxtables looks every chain name up in a 512-bucket list of strings
// (once to announce it, once for every rule that jumps to it) and libiptc
// rebuilds its chain index every 355 new chains. At 10,000 services (111,000
// nat chains, 545,000 entries) that is about 4 s of the 5 s an engine's cold
// start takes. The kernel itself only wants one blob per table
// (IPT_SO_SET_REPLACE), which Go can lay out in a fraction of that.
//
// The package has two halves:
//   - Encoder turns one rule of an iptables-restore input ("-A CHAIN" and
//     what follows) into the entry iptables-legacy would build for it
//     (struct ipt_entry or ip6t_entry with its matches and target), for the
//     vocabulary svcproxy's engines write. Anything else is ErrUnsupported.
//   - Restore reads a table from the kernel, applies an iptables-restore
//     --noflush input to it as iptables-legacy-restore would, and writes it
//     back in one replace, keeping every other chain and rule (and their
//     counters) as they were.
//
// A caller falls back to the iptables tools on ErrUnsupported: nothing has
// been written then.
package xtblob
