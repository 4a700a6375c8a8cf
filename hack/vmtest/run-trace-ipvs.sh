#!/usr/bin/env bash
# run-trace-ipvs.sh - minimal-proxy trace over real IPVS: builds the
# examples/minimal-proxy test binary statically and runs TestTraceKernelIPVS
# as root in a qemu guest (see vmtest.sh) whose kernel has IPVS: the IPVS
# engine programs a namespace and trace there is checked against real
# packets at every check of the conformance table. TestDiffKernelIPVS runs
# beside it (minimal-proxy diff over real IPVS after a sync and after hand
# edits; seconds). The test suite does not call this script any more: the
# ipvs e2e's guest (run-e2e-ipvs.sh) checks trace against real packets at
# every check of the same table, over the binary's state, and runs
# TestDiffKernelIPVS; this is the in-process engine's run, by hand (about
# fifteen minutes under TCG). The tests may not skip there: -test.v output
# is checked for SKIP lines.
#
#   hack/vmtest/run-trace-ipvs.sh [extra test flags...]
#
# Environment: SVCPROXY_TRACE_VM_TIMEOUT (seconds, default 2100).
#
# Exit status: that of the tests (124/125: the VM timed out or failed).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=$(mktemp -d "${TMPDIR:-/tmp}/svcproxy-trace-ipvs.XXXXXX")
trap 'rm -rf "$out"' EXIT
CGO_ENABLED=0 go test -c -o "$out/minimal-proxy.test" ./examples/minimal-proxy/
timeout=${SVCPROXY_TRACE_VM_TIMEOUT:-2100}
cd examples/minimal-proxy
rc=0
"$root/hack/vmtest/vmtest.sh" --timeout "$timeout" -- "$out/minimal-proxy.test" -test.v -test.count=1 \
  -test.run '^(TestTraceKernelIPVS|TestDiffKernelIPVS)$' -test.timeout "$((timeout - 60))s" "$@" | tee "$out/log" || rc=$?
if grep -q -- '--- SKIP' "$out/log"; then
  echo "run-trace-ipvs: the test skipped inside the VM" >&2
  [ "$rc" != 0 ] || rc=1
fi
if ! grep -q -- '--- PASS: TestTraceKernelIPVS ' "$out/log" && [ "$rc" = 0 ]; then
  echo "run-trace-ipvs: TestTraceKernelIPVS did not pass in the VM" >&2
  rc=1
fi
exit "$rc"
