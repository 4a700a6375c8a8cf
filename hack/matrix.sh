#!/usr/bin/env bash
# matrix.sh - the real-kernel tests on the kernels and tools users run: for
# each Debian suite, qemu guests (hack/vmtest/vmtest.sh --suite) boot that
# suite's kernel with that suite's own iptables, nft, ipset, ipvsadm,
# conntrack and iproute2, and run the engines' real-kernel tests there;
# then prints one table (suite, kernel, iptables, nft, engine, counts).
#
#   hack/matrix.sh [--suites "bullseye bookworm trixie"] [--ci] [--cells RE]
#                  [--one-boot] [--timeout SEC] [--keep DIR]
#
#   --suites LIST  the Debian suites [default: bullseye bookworm trixie]
#   --cells RE     run only the cells whose engine name matches the
#                  extended regular expression RE, whole (e.g.
#                  'nftables|nftables gate'); the others are left out of
#                  the table and do not count as failed
#   --ci           the subset .ci/run runs on the oldest and newest suites
#                  (bullseye trixie unless --suites): the fast writers'
#                  same-result tests (internal/xtblob's Restore against
#                  iptables-legacy-restore, xtables' TestInProcessRestoreMatchesTool;
#                  the nftables netlink writer against nft, TestKernelNetlink*,
#                  where the nftables mode is accepted) and the nftables
#                  version gate (the refusal on bullseye)
#   --one-boot     one guest per suite runs every cell in turn (the
#                  default with --ci); without it each cell gets a guest of
#                  its own, because under TCG on a busy 2-core host one
#                  suite's cells take longer than one guest's time limit
#                  (bullseye's first five took 80 minutes)
#   --timeout SEC  each guest's time limit [default 5400; 1200 with --ci];
#                  a cell cut off shows as "unfinished" in the table
#   --keep DIR     keep the guests' logs (SUITE.log, and SUITE.CELL.log per
#                  guest) and the test binaries in DIR
#
# Cells (engine column):
#   iptables nft            iptables' real-kernel tests, nft backend
#   iptables legacy         the same, legacy backend, the restores written
#                           from the process where iptables is 1.8.9 or
#                           later, else by iptables-legacy-restore
#   iptables legacy tool    the same with every restore through
#                           iptables-legacy-restore
#                           (SVCPROXY_IPTABLES_LEGACY_IN_PROCESS=0)
#   legacy same-result      in process against the tool: internal/xtblob's
#                           kernel tests, xtables' TestInProcess*, iptables'
#                           TestInProcessWalkMatchesTool
#   nftables                nftables' real-kernel tests (the netlink writer
#                           against nft included)
#   nftables same-result    the netlink writer against nft (TestKernelNetlink*)
# The fast writers are on by default only for the versions internal/fastpath
# lists (the ones this matrix verified); in the guest both are switched on
# through their environment variables (SVCPROXY_IPTABLES_LEGACY_IN_PROCESS=1,
# SVCPROXY_NFTABLES_NETLINK=1), so that a suite is verified whatever that
# list says, and the "iptables legacy tool" cell switches the in-process
# writer off (=0).
#   nftables gate           the version check: nftkernel.NewInterfaces refuses kernel
#                           < 5.13 or nft < 1.0.1 with a *VersionError, and
#                           minimal-proxy --proxy-mode=nftables then runs the
#                           iptables mode (one log line); on a suite below
#                           the requirements (bullseye) this is the nftables
#                           cell, and the other nftables cells are not run
#   userspace nft           userspace's real-kernel tests, nft backend (a
#                           cell per backend: the conformance table through
#                           userspace sockets takes about 13 minutes per
#                           family and backend under TCG on a busy host)
#   userspace legacy        the same, legacy backend
#   ipvs                    ipvs' real-kernel tests
# Counts are the `--- PASS/FAIL/SKIP` lines of -test.v (tests and subtests).
#
# Exit status: 0 when every cell ran and nothing failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

suites='' ci='' keep='' cells='' one_boot='' guest_timeout=''
while [ $# -gt 0 ]; do
  case $1 in
    --suites) suites=$2; shift 2 ;;
    --cells) cells=$2; shift 2 ;;
    --ci) ci=1; one_boot=1; shift ;;
    --one-boot) one_boot=1; shift ;;
    --timeout) guest_timeout=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "matrix: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$suites" ] || { [ -n "$ci" ] && suites="bullseye trixie" || suites="bullseye bookworm trixie"; }

if [ -n "$keep" ]; then out=$keep; mkdir -p "$out"; else
  out=$(mktemp -d "${TMPDIR:-/tmp}/svcproxy-matrix.XXXXXX"); trap 'rm -rf "$out"' EXIT
fi
out=$(cd "$out" && pwd)
bin=$out/bin
mkdir -p "$bin"

# The minimum the nftables mode needs, as nftables.MinKernelVersion and
# MinNFTVersion say: which suites are below it (the gate's expectation).
nft_expect() { case $1 in bullseye|buster|stretch) echo refused ;; *) echo accepted ;; esac; }

echo "matrix: building the test binaries (CGO_ENABLED=0 go test -c)" >&2
pkgs="iptables iptables/xtables internal/xtblob nftables examples/minimal-proxy"
[ -n "$ci" ] || pkgs="$pkgs userspace ipvs"
for p in $pkgs; do
  CGO_ENABLED=0 go test -c -o "$bin/${p##*/}.test" "./$p"
done
CGO_ENABLED=0 go build -o "$bin/minimal-proxy" ./examples/minimal-proxy

# The guest's wrapper: runs every cell whose name matches CELLS (all when
# empty) in turn, each in its package's directory (the tests read
# ./testdata), between markers.
# cell NAME PKGDIR BINARY ARGS...
guest_script() { # SUITE CELLS
  local expect
  expect=$(nft_expect "$1")
  cat <<EOF
#!/bin/sh
B=/matrix/bin
CELLS='$2'
echo "MATRIX-VERSIONS kernel=\$(uname -r) iptables=\$(iptables --version | sed 's/^iptables v//; s/ .*//') nft=\$(nft --version | sed 's/^nftables v//; s/ .*//')"
set -f # the -test.skip patterns below are not globs
cell() {
  name=\$1 dir=\$2; shift 2
  [ -z "\$CELLS" ] || echo "\$name" | grep -Eqx "\$CELLS" || return 0
  echo "=== MATRIX-CELL \$name"
  mkdir -p "$root/\$dir"
  (cd "$root/\$dir" && "\$@" -test.v -test.count=1 -test.timeout 50m) 2>&1
  echo "=== MATRIX-END \$name rc=\$?"
}
# Below iptables 1.8.9 the engines never write legacy tables in process
# (xtables: the tool is used), and the encoder's corpus holds rules that
# 1.8.7 encodes otherwise (REDIRECT --random) or refuses (port 0): its
# byte-for-byte comparisons with the tool's encoding are left out there.
# Restore's same-result tests (the tables the process writes, listed by
# that suite's iptables-legacy-save) run on every suite.
# The engine's differential walk (in process against the tool) has no
# in-process side there either.
ENCODE_SKIP= OLD_IPT=
case \$(iptables --version) in
  *v1.8.[0-8]" "*|*v1.[0-7].*) OLD_IPT=1 ENCODE_SKIP='|^TestEncodeMatchesKernel\$|^TestEncodeRandomMatchesKernel\$' ;;
esac
export SVCPROXY_EXPECT_NFTABLES=$expect SVCPROXY_MINIMAL_PROXY=\$B/minimal-proxy
# Emulated (TCG) on a busy host: the probes' slow retries (netnstest) and
# the e2e's waits are stretched by this factor.
export SVCPROXY_E2E_SLOWDOWN=${SVCPROXY_E2E_SLOWDOWN:-5}
# The fast writers on, whatever internal/fastpath's verified versions say.
export SVCPROXY_IPTABLES_LEGACY_IN_PROCESS=1 SVCPROXY_NFTABLES_NETLINK=1
EOF
  if [ -n "$ci" ]; then
    cat <<'EOF'
cell "legacy same-result" internal/xtblob $B/xtblob.test -test.run '^(TestKernelHasRevision|TestCheckKernelRevisions|TestKernelRoundTrip|TestKernelSameResult|TestKernelGoldens|TestKernelDeleteGoldens)$'
[ -n "$OLD_IPT" ] || cell "legacy same-result" iptables/xtables $B/xtables.test -test.run '^TestInProcessRestoreMatchesTool$'
EOF
  else
    cat <<'EOF'
cell "iptables nft" iptables $B/iptables.test -test.run 'Kernel/^nft' -test.skip '^TestLockHeldKernel$'
cell "iptables legacy" iptables $B/iptables.test -test.run 'Kernel/^legacy'
cell "iptables legacy tool" iptables env SVCPROXY_IPTABLES_LEGACY_IN_PROCESS=0 $B/iptables.test -test.run 'Kernel/^legacy'
cell "legacy same-result" internal/xtblob $B/xtblob.test -test.run 'Kernel' -test.skip "^\$$ENCODE_SKIP"
[ -n "$OLD_IPT" ] || cell "legacy same-result" iptables/xtables $B/xtables.test -test.run '^TestInProcess'
[ -n "$OLD_IPT" ] || cell "legacy same-result" iptables $B/iptables.test -test.run '^TestInProcessWalkMatchesTool$'
EOF
  fi
  if [ "$expect" = accepted ]; then
    if [ -n "$ci" ]; then
      # The writer's same-result tests only: the cold starts
      # (TestKernelNetlinkColdStart: 122, each 5 to 20 s of nft runs
      # under TCG on a busy host) are too slow for CI.
      echo "cell \"nftables same-result\" nftables \$B/nftables.test -test.run '^TestKernelNetlink(Equivalence|InterfaceMatches|Fault|SelfCheck)\$'"
    else
      echo "cell \"nftables\" nftables \$B/nftables.test -test.run 'Kernel'"
    fi
  fi
  cat <<'EOF'
cell "nftables gate" nftables $B/nftables.test -test.run '^TestKernelVersionGate$'
cell "nftables gate" examples/minimal-proxy $B/minimal-proxy.test -test.run '^TestNFTablesVersionGate$'
EOF
  [ -n "$ci" ] || cat <<'EOF'
cell "userspace nft" userspace $B/userspace.test -test.run 'Kernel/^nft'
cell "userspace legacy" userspace $B/userspace.test -test.run 'Kernel/^legacy'
cell "ipvs" ipvs $B/ipvs.test -test.run 'Kernel'
EOF
}

copies=(--copy "$bin:/matrix/bin")
for p in $pkgs; do
  [ ! -d "$p/testdata" ] || copies+=(--copy "$root/$p/testdata:$root/$p/testdata")
done
for f in examples/minimal-proxy/*.yaml; do copies+=(--copy "$root/$f:$root/$f"); done

# A guest of the CI subset has 20 minutes (CI keeps within its budget; a
# cell cut off shows as unfinished in the table); otherwise 90.
if [ -z "$guest_timeout" ]; then
  guest_timeout=5400
  [ -z "$ci" ] || guest_timeout=1200
fi
rc=0
# boot SUITE CELLS NAME: one guest running the cells matching CELLS (all
# when empty); its log is NAME.log
boot() {
  local start src=0
  guest_script "$1" "$2" > "$out/guest-$3.sh"
  chmod +x "$out/guest-$3.sh"
  echo "matrix: $1: booting its kernel with its tools${2:+ for '$2'} (log: $out/$3.log)" >&2
  start=$(date +%s)
  (cd / && "$root/hack/vmtest/vmtest.sh" --suite "$1" --mem 3072 --cpus 2 --timeout "$guest_timeout" \
      "${copies[@]}" -- "$out/guest-$3.sh") > "$out/$3.log" 2>&1 || src=$?
  echo "matrix: $1${2:+ ($2)}: guest done in $(( $(date +%s) - start ))s (status $src)" | tee -a "$out/times" >&2
  [ "$src" = 0 ] || rc=1
}
for s in $suites; do
  if [ -n "$one_boot" ]; then
    boot "$s" "$cells" "$s"
    continue
  fi
  # One guest per cell, in the script's order; SUITE.log is their logs
  # end to end, which the table reads as it reads one boot's.
  : > "$out/$s.log"
  guest_script "$s" '' | sed -n 's/^.*cell "\([^"]*\)".*$/\1/p' | awk '!seen[$0]++' > "$out/cells-$s"
  while IFS= read -r c; do
    [ -z "$cells" ] || echo "$c" | grep -Eqx "$cells" || continue
    boot "$s" "$c" "$s.${c// /-}"
    cat "$out/$s.${c// /-}.log" >> "$out/$s.log"
  done < "$out/cells-$s"
done

# The table: one row per (suite, engine), counts summed over the cell's
# binaries; rc is the worst exit status of them.
table() {
  printf '| suite | kernel | iptables | nft | engine | passed | failed | skipped |\n'
  printf '|---|---|---|---|---|---|---|---|\n'
  for s in $suites; do
    awk -v suite="$s" '
      # a cell with no end marker before the next boot or cell, or the
      # end of the log, was cut off (the guest timed out or died)
      /^MATRIX-VERSIONS / { if (cell != "") cut[cell] = 1; cell = ""; for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
      /^=== MATRIX-CELL / { if (cell != "") cut[cell] = 1; cell = substr($0, 17); if (!(cell in seen)) { seen[cell] = 1; order[++n] = cell } }
      /^=== MATRIX-END / { st = $NF; sub(/^rc=/, "", st); if (st != 0) bad[cell] = 1; cell = "" }
      cell != "" && /^ *--- PASS: / { pass[cell]++ }
      cell != "" && /^ *--- FAIL: / { fail[cell]++ }
      cell != "" && /^ *--- SKIP: / { skip[cell]++ }
      END {
        if (cell != "") cut[cell] = 1
        if (n == 0) { printf "| %s | %s | %s | %s | (the guest ran no cell: see its log) | 0 | 1 | 0 |\n", suite, v["kernel"], v["iptables"], v["nft"]; exit }
        for (i = 1; i <= n; i++) {
          c = order[i]; f = fail[c] + 0
          if (bad[c] && f == 0) f = "exit≠0"
          if (cut[c]) f = f " unfinished"
          if (pass[c] + 0 == 0 && !bad[c]) f = f " (none passed)"
          printf "| %s | %s | %s | %s | %s | %d | %s | %d |\n", suite, v["kernel"], v["iptables"], v["nft"], c, pass[c], f, skip[c]
        }
      }' "$out/$s.log"
  done
}
table | tee "$out/table.md"
# failed: a count above 0, a non-zero exit, a cell where nothing passed
awk -F'|' 'NR > 2 && ($8 + 0 > 0 || $8 ~ /exit|none|ran no|unfinished/) { bad = 1 } END { exit bad }' "$out/table.md" || rc=1
# The gate cell must show the suite's expectation: refused below 5.13/1.0.1.
for s in $suites; do
  [ -z "$cells" ] || echo "nftables gate" | grep -Eqx "$cells" || continue
  if [ "$(nft_expect "$s")" = refused ] && ! grep -q 'refused as expected' "$out/$s.log"; then
    echo "matrix: $s: the nftables gate did not refuse" >&2; rc=1
  fi
done
[ "$rc" = 0 ] || echo "matrix: failures: see the logs in $out (--keep DIR keeps them)" >&2
exit "$rc"
