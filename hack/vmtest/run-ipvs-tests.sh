#!/usr/bin/env bash
# run-ipvs-tests.sh - the IPVS engine's tests against a real kernel: builds
# the ipvs test binary statically and runs it as root in a qemu guest (see
# vmtest.sh) where IPVS, ipset and dummy links exist. The tests that need
# them skip elsewhere; here none may skip silently: -test.v output is
# checked for SKIP lines.
#
#   hack/vmtest/run-ipvs-tests.sh [-run REGEXP] [extra go test flags...]
#
# Exit status: that of the tests (124/125: the VM timed out or failed).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=$(mktemp -d "${TMPDIR:-/tmp}/svcproxy-ipvs-tests.XXXXXX")
trap 'rm -rf "$out"' EXIT
run='Kernel'
if [ "${1:-}" = "-run" ]; then run=$2; shift 2; fi
CGO_ENABLED=0 go test -c -o "$out/ipvs.test" ./ipvs/
cd ipvs
rc=0
"$root/hack/vmtest/vmtest.sh" -- "$out/ipvs.test" -test.v -test.count=1 -test.run "$run" "$@" | tee "$out/log" || rc=$?
# TestKernelInVM is the host-side wrapper that calls this script; in the
# guest (which has IPVS) it skips by design.
if grep -- '--- SKIP' "$out/log" | grep -qv 'TestKernelInVM'; then
  echo "run-ipvs-tests: some real-kernel tests skipped inside the VM" >&2
  [ "$rc" != 0 ] || rc=1
fi
if ! grep -q -- '--- PASS' "$out/log" && [ "$rc" = 0 ]; then
  echo "run-ipvs-tests: no test ran" >&2
  rc=1
fi
exit "$rc"
