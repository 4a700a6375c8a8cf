#!/usr/bin/env bash
# run-e2e-ipvs.sh - examples/minimal-proxy's end-to-end test in ipvs mode,
# inside a qemu guest whose kernel has IPVS (see vmtest.sh): the real etcd
# and kube-apiserver of both versions (hack/e2e/build.sh, cached), the minimal-proxy binary
# and the package's test binary, all static, are copied into the guest, and
# TestE2EKubeAPIServerIPVS runs there as root against them, trace checked
# against the real packets at every converged check. Before it (it is
# parallel, these are not, so they never run at once: the API server
# starts slowly enough under TCG without a neighbour),
# TestTraceKernelUpstreamIPVS: upstream kube-proxy v1.37.2's ipvs state for
# every step (ipvs/testdata/upstream-v1.37.2, copied into the guest) loaded
# with ipvsadm, ipset and iptables-restore, and trace over it checked
# against real packets; and TestDiffKernelIPVS (minimal-proxy diff over
# real IPVS after a sync and after hand edits; seconds). None of the tests
# or subtests may skip there: -test.v output is checked for SKIP lines.
#
#   hack/vmtest/run-e2e-ipvs.sh [extra test flags...]
#
# Environment: SVCPROXY_E2E_VM_MEM (MB, default 4096), SVCPROXY_E2E_VM_CPUS
# (default 2), SVCPROXY_E2E_VM_TIMEOUT (seconds, default 2100), and
# SVCPROXY_E2E_SLOWDOWN (the factor the test stretches its waits by in the
# guest, default 5: TCG emulation is that much slower than the host);
# SVCPROXY_E2E_SCENARIOS and SVCPROXY_E2E_REPEAT are passed on (the test's
# scenario filter and repeat count, to chase one scenario's failure).
#
# Exit status: that of the test (124/125: the VM timed out or failed).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=$(mktemp -d "${TMPDIR:-/tmp}/svcproxy-e2e-ipvs.XXXXXX")
trap 'rm -rf "$out"' EXIT

# The control planes the test's clusters use: kube-apiserver v1.34 for
# IPv4 and v1.37 for IPv6, or only $SVCPROXY_E2E_KUBE's for both. Each
# version's pair goes into the guest under /e2e/<version>/.
kubes="1.34 1.37"
[ -z "${SVCPROXY_E2E_KUBE:-}" ] || kubes="${SVCPROXY_E2E_KUBE#v}"
cp_args=()
for kube in $kubes; do
  bins=$(hack/e2e/build.sh --kube "$kube")
  etcd=$(sed -n 's/^ETCD=//p' <<<"$bins")
  apiserver=$(sed -n 's/^KUBE_APISERVER=//p' <<<"$bins")
  [ -x "$etcd" ] && [ -x "$apiserver" ] || { echo "run-e2e-ipvs: hack/e2e/build.sh --kube $kube gave no binaries" >&2; exit 1; }
  v=${kube//./_}
  cp_args+=(--copy "$etcd:/e2e/$kube/etcd" --copy "$apiserver:/e2e/$kube/kube-apiserver"
    --env "SVCPROXY_E2E_ETCD_$v=/e2e/$kube/etcd" --env "SVCPROXY_E2E_KUBE_APISERVER_$v=/e2e/$kube/kube-apiserver")
done
[ -z "${SVCPROXY_E2E_KUBE:-}" ] || cp_args+=(--env "SVCPROXY_E2E_KUBE=$SVCPROXY_E2E_KUBE")
for v in SVCPROXY_E2E_SCENARIOS SVCPROXY_E2E_REPEAT; do
  [ -z "${!v:-}" ] || cp_args+=(--env "$v=${!v}")
done
CGO_ENABLED=0 go build -o "$out/minimal-proxy" ./examples/minimal-proxy/
CGO_ENABLED=0 go test -c -o "$out/minimal-proxy.test" ./examples/minimal-proxy/

cd examples/minimal-proxy
rc=0
"$root/hack/vmtest/vmtest.sh" \
  --mem "${SVCPROXY_E2E_VM_MEM:-4096}" --cpus "${SVCPROXY_E2E_VM_CPUS:-2}" \
  --timeout "${SVCPROXY_E2E_VM_TIMEOUT:-2100}" \
  --copy "$root/ipvs/testdata/upstream-v1.37.2" \
  "${cp_args[@]}" --copy "$out/minimal-proxy:/e2e/minimal-proxy" \
  --env SVCPROXY_MINIMAL_PROXY=/e2e/minimal-proxy --env "SVCPROXY_E2E_SLOWDOWN=${SVCPROXY_E2E_SLOWDOWN:-5}" \
  -- "$out/minimal-proxy.test" -test.v -test.count=1 -test.run '^(TestTraceKernelUpstreamIPVS|TestDiffKernelIPVS|TestE2EKubeAPIServerIPVS)$' -test.timeout 34m "$@" |
  tee "$out/log" || rc=$?
if grep -q -- '--- SKIP' "$out/log"; then
  echo "run-e2e-ipvs: the test skipped inside the VM" >&2
  [ "$rc" != 0 ] || rc=1
fi
for test in TestTraceKernelUpstreamIPVS TestDiffKernelIPVS TestE2EKubeAPIServerIPVS; do
  if ! grep -q -- "--- PASS: $test " "$out/log" && [ "$rc" = 0 ]; then
    echo "run-e2e-ipvs: $test did not pass in the VM" >&2
    rc=1
  fi
done
exit "$rc"
