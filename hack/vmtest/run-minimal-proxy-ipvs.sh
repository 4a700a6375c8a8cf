#!/usr/bin/env bash
# run-minimal-proxy-ipvs.sh - examples/minimal-proxy's IPVS tests in one
# qemu guest whose kernel has IPVS (see vmtest.sh), side by side:
#   - TestE2EKubeAPIServerIPVS, the end-to-end test in ipvs mode, with the
#     real etcd and kube-apiserver of both versions (hack/e2e/build.sh,
#     cached);
#   - TestTraceKernelIPVS, trace over real IPVS: the engine programs a
#     namespace, trace is checked against real packets at every check;
#   - TestDiffKernelIPVS, diff over real IPVS after a sync and after hand
#     edits (seconds).
# One boot and one copy of the binaries serve them all. The minimal-proxy
# binary and the package's test binary are static. None of the tests may
# skip there (-test.v output is checked for SKIP lines), and each must pass.
#
#   hack/vmtest/run-minimal-proxy-ipvs.sh [extra test flags...]
#
# Environment: SVCPROXY_IPVS_GUEST_TESTS (the tests to run, default all
# three), SVCPROXY_E2E_VM_MEM (MB, default 6144:
# the e2e's control plane beside the trace test's namespaces; the binaries
# and tmpfs count too), SVCPROXY_E2E_VM_CPUS
# (default 2), SVCPROXY_E2E_VM_TIMEOUT (seconds, default 2100), and
# SVCPROXY_E2E_SLOWDOWN (the factor the e2e stretches its waits by in the
# guest, default 5: TCG emulation is that much slower than the host).
#
# Exit status: that of the tests (124/125: the VM timed out or failed).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=$(mktemp -d "${TMPDIR:-/tmp}/svcproxy-minimal-proxy-ipvs.XXXXXX")
trap 'rm -rf "$out"' EXIT

tests=${SVCPROXY_IPVS_GUEST_TESTS:-TestE2EKubeAPIServerIPVS TestTraceKernelIPVS TestDiffKernelIPVS}
pattern="^($(tr -s ' ' '|' <<<"$tests" | sed 's/^|//; s/|$//'))\$"

args=()
case " $tests " in
*" TestE2EKubeAPIServerIPVS "*)
  # The control planes the e2e's clusters use: kube-apiserver v1.34 for
  # IPv4 and v1.37 for IPv6, or only $SVCPROXY_E2E_KUBE's for both. Each
  # version's pair goes into the guest under /e2e/<version>/.
  kubes="1.34 1.37"
  [ -z "${SVCPROXY_E2E_KUBE:-}" ] || kubes="${SVCPROXY_E2E_KUBE#v}"
  for kube in $kubes; do
    bins=$(hack/e2e/build.sh --kube "$kube")
    etcd=$(sed -n 's/^ETCD=//p' <<<"$bins")
    apiserver=$(sed -n 's/^KUBE_APISERVER=//p' <<<"$bins")
    [ -x "$etcd" ] && [ -x "$apiserver" ] || { echo "run-minimal-proxy-ipvs: hack/e2e/build.sh --kube $kube gave no binaries" >&2; exit 1; }
    v=${kube//./_}
    args+=(--copy "$etcd:/e2e/$kube/etcd" --copy "$apiserver:/e2e/$kube/kube-apiserver"
      --env "SVCPROXY_E2E_ETCD_$v=/e2e/$kube/etcd" --env "SVCPROXY_E2E_KUBE_APISERVER_$v=/e2e/$kube/kube-apiserver")
  done
  [ -z "${SVCPROXY_E2E_KUBE:-}" ] || args+=(--env "SVCPROXY_E2E_KUBE=$SVCPROXY_E2E_KUBE")
  CGO_ENABLED=0 go build -o "$out/minimal-proxy" ./examples/minimal-proxy/
  args+=(--copy "$out/minimal-proxy:/e2e/minimal-proxy" --env SVCPROXY_MINIMAL_PROXY=/e2e/minimal-proxy
    --env "SVCPROXY_E2E_SLOWDOWN=${SVCPROXY_E2E_SLOWDOWN:-5}")
  ;;
esac
CGO_ENABLED=0 go test -c -o "$out/minimal-proxy.test" ./examples/minimal-proxy/

timeout=${SVCPROXY_E2E_VM_TIMEOUT:-2100}
cd examples/minimal-proxy
rc=0
"$root/hack/vmtest/vmtest.sh" \
  --mem "${SVCPROXY_E2E_VM_MEM:-6144}" --cpus "${SVCPROXY_E2E_VM_CPUS:-2}" --timeout "$timeout" \
  "${args[@]}" \
  -- "$out/minimal-proxy.test" -test.v -test.count=1 -test.run "$pattern" \
  -test.timeout "$((timeout - 60))s" "$@" |
  tee "$out/log" || rc=$?
if grep -q -- '--- SKIP' "$out/log"; then
  echo "run-minimal-proxy-ipvs: a test skipped inside the VM" >&2
  [ "$rc" != 0 ] || rc=1
fi
for t in $tests; do
  if ! grep -q -- "--- PASS: $t " "$out/log" && [ "$rc" = 0 ]; then
    echo "run-minimal-proxy-ipvs: $t did not pass in the VM" >&2
    rc=1
  fi
done
exit "$rc"
