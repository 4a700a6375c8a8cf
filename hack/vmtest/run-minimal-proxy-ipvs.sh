#!/usr/bin/env bash
# run-minimal-proxy-ipvs.sh - examples/minimal-proxy's tests that need a
# kernel with IPVS, all in one qemu guest (see vmtest.sh), as root:
#
#   TestTraceKernelUpstreamIPVS  upstream kube-proxy v1.37.2's ipvs state for
#                                every step (ipvs/testdata/upstream-v1.37.2,
#                                copied into the guest) loaded with ipvsadm,
#                                ipset and iptables-restore, and trace over it
#                                checked against real packets
#   TestDiffKernelIPVS           minimal-proxy diff over real IPVS after a sync
#                                and after hand edits (seconds)
#   TestTraceKernelIPVS          the IPVS engine programs a namespace; trace
#                                there is checked against real packets at every
#                                check of the conformance table (both families)
#   TestE2EKubeAPIServerIPVS     the ipvs mode's end-to-end test: the real etcd
#                                and kube-apiserver of both versions
#                                (hack/e2e/build.sh, cached) and the
#                                minimal-proxy binary, all static, copied in
#
# The first two are sequential and run first (TestTraceKernelUpstreamIPVS
# counts the standard logger's lines, which no parallel test may write
# meanwhile); the last two are parallel and run side by side on the
# guest's two vCPUs. One boot for all four: the guest used to be two (one
# for the trace and diff tests, one for the upstream trace and the e2e).
# None of the tests or subtests may skip there: -test.v output is checked
# for SKIP lines, and each test run must pass.
#
#   hack/vmtest/run-minimal-proxy-ipvs.sh [-run REGEXP] [extra test flags...]
#
# -run chooses among the four (default: all of them). Environment:
# SVCPROXY_E2E_VM_MEM (MB, default 4096), SVCPROXY_E2E_VM_CPUS (default 2),
# SVCPROXY_E2E_VM_TIMEOUT (seconds, default 2280), and SVCPROXY_E2E_SLOWDOWN
# (the factor the tests stretch their waits by in the guest, default 5: TCG
# emulation is that much slower than the host); SVCPROXY_E2E_SCENARIOS and
# SVCPROXY_E2E_REPEAT are passed on (the e2e's scenario filter and repeat
# count, to chase one scenario's failure).
#
# Exit status: that of the tests (124/125: the VM timed out or failed).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=$(mktemp -d "${TMPDIR:-/tmp}/svcproxy-minimal-proxy-ipvs.XXXXXX")
trap 'rm -rf "$out"' EXIT
tests="TestTraceKernelUpstreamIPVS TestDiffKernelIPVS TestTraceKernelIPVS TestE2EKubeAPIServerIPVS"
run="^(${tests// /|})\$"
if [ "${1:-}" = "-run" ]; then run=$2; shift 2; fi
chosen="" # the tests -run's top-level part matches
for test in $tests; do
  if grep -qE -- "${run%%/*}" <<<"$test"; then chosen="$chosen $test"; fi
done
[ -n "$chosen" ] || { echo "run-minimal-proxy-ipvs: -run $run chooses none of:$tests" >&2; exit 2; }

cp_args=()
if [[ $chosen == *TestE2EKubeAPIServerIPVS* ]]; then
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
    cp_args+=(--copy "$etcd:/e2e/$kube/etcd" --copy "$apiserver:/e2e/$kube/kube-apiserver"
      --env "SVCPROXY_E2E_ETCD_$v=/e2e/$kube/etcd" --env "SVCPROXY_E2E_KUBE_APISERVER_$v=/e2e/$kube/kube-apiserver")
  done
  [ -z "${SVCPROXY_E2E_KUBE:-}" ] || cp_args+=(--env "SVCPROXY_E2E_KUBE=$SVCPROXY_E2E_KUBE")
  for v in SVCPROXY_E2E_SCENARIOS SVCPROXY_E2E_REPEAT; do
    [ -z "${!v:-}" ] || cp_args+=(--env "$v=${!v}")
  done
fi
CGO_ENABLED=0 go build -o "$out/minimal-proxy" ./examples/minimal-proxy/
CGO_ENABLED=0 go test -c -o "$out/minimal-proxy.test" ./examples/minimal-proxy/

timeout=${SVCPROXY_E2E_VM_TIMEOUT:-2280}
cd examples/minimal-proxy
rc=0
"$root/hack/vmtest/vmtest.sh" \
  --mem "${SVCPROXY_E2E_VM_MEM:-4096}" --cpus "${SVCPROXY_E2E_VM_CPUS:-2}" --timeout "$timeout" \
  --copy "$root/ipvs/testdata/upstream-v1.37.2" \
  "${cp_args[@]}" --copy "$out/minimal-proxy:/e2e/minimal-proxy" \
  --env SVCPROXY_MINIMAL_PROXY=/e2e/minimal-proxy --env "SVCPROXY_E2E_SLOWDOWN=${SVCPROXY_E2E_SLOWDOWN:-5}" \
  -- "$out/minimal-proxy.test" -test.v -test.count=1 -test.run "$run" -test.timeout "$((timeout - 120))s" "$@" |
  tee "$out/log" || rc=$?
if grep -q -- '--- SKIP' "$out/log"; then
  echo "run-minimal-proxy-ipvs: a test skipped inside the VM" >&2
  [ "$rc" != 0 ] || rc=1
fi
for test in $chosen; do
  if ! grep -q -- "--- PASS: $test " "$out/log" && [ "$rc" = 0 ]; then
    echo "run-minimal-proxy-ipvs: $test did not pass in the VM" >&2
    rc=1
  fi
done
exit "$rc"
