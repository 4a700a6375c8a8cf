#!/usr/bin/env bash
# Build the real etcd and kube-apiserver that the end-to-end test of
# examples/minimal-proxy runs against, from the versions pinned in a tools
# module (a module of its own, so the main module's "go test ./..." never
# compiles them): hack/e2e/tools/go.mod (kube-apiserver v1.34, the default)
# or hack/e2e/tools-v1.37/go.mod (v1.37).
#
# Usage: hack/e2e/build.sh [--kube 1.34|1.37] [CACHE_ROOT]
#
# --kube (or $SVCPROXY_E2E_KUBE) picks the tools module; each version is
# cached under its own key, so building one never evicts the other.
#
# The binaries go to CACHE_ROOT/<versions>/ (CACHE_ROOT defaults to
# $SVCPROXY_E2E_CACHE, else ~/.cache/svcproxy-e2e) and are reused when both
# are already there, so only the first run is slow (about 6 minutes on 2
# cores). On success the script prints two lines, and nothing else on stdout:
#
#   ETCD=/path/to/etcd
#   KUBE_APISERVER=/path/to/kube-apiserver
#
# Progress and errors go to stderr; the exit status is non-zero on failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kube="${SVCPROXY_E2E_KUBE:-1.34}"
if [[ "${1:-}" == "--kube" ]]; then
	kube="${2:?--kube needs a version: 1.34 or 1.37}"
	shift 2
fi
case "${kube#v}" in
1.34) tools="${here}/tools" ;;
1.37) tools="${here}/tools-v1.37" ;;
*)
	echo "build.sh: unknown --kube ${kube}: want 1.34 or 1.37" >&2
	exit 2
	;;
esac

cache_root="${1:-${SVCPROXY_E2E_CACHE:-${HOME:-/root}/.cache/svcproxy-e2e}}"

# The versions come from the tools module itself, so editing go.mod is the only
# way to change them and the cache directory name follows automatically.
version_of() {
	(cd "${tools}" && go list -m -f '{{.Version}}' "$1")
}
k8s_version="$(version_of k8s.io/kubernetes)"
etcd_version="$(version_of go.etcd.io/etcd/server/v3)"
goversion="$(go env GOVERSION)"
# "-v2": the build flags below (version stamping) are part of the key.
out="${cache_root}/kubernetes-${k8s_version}_etcd-${etcd_version}_${goversion}-v2"

etcd_bin="${out}/etcd"
apiserver_bin="${out}/kube-apiserver"

mkdir -p "${out}"
# One build at a time per cache directory: a second caller (a test run
# while the first build is still going) waits, then reuses its result.
exec 9>"${out}/.lock"
if ! flock -n 9; then
	echo "waiting for another build into ${out}" >&2
	flock 9
fi

if [[ -x "${etcd_bin}" && -x "${apiserver_bin}" ]]; then
	echo "reusing ${out}" >&2
else
	# Build into a scratch directory in the cache and rename at the end, so
	# an interrupted build never leaves a half-written binary that a later
	# run would reuse.
	tmp="$(mktemp -d "${out}/.build.XXXXXX")"
	trap 'rm -rf "${tmp}"' EXIT
	cd "${tools}"
	export CGO_ENABLED=0 GOFLAGS=-mod=readonly
	echo "building etcd ${etcd_version} into ${out}" >&2
	go build -trimpath -o "${tmp}/etcd" go.etcd.io/etcd/server/v3
	echo "building kube-apiserver ${k8s_version} into ${out}" >&2
	# Stamp the version, as the release build does (kube-apiserver --version
	# and /version then report it instead of v0.0.0-master).
	minor="${k8s_version#v1.}"
	minor="${minor%%.*}"
	pkg=k8s.io/component-base/version
	go build -trimpath -o "${tmp}/kube-apiserver" \
		-ldflags "-X ${pkg}.gitVersion=${k8s_version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean" \
		k8s.io/kubernetes/cmd/kube-apiserver
	mv -f "${tmp}/etcd" "${etcd_bin}"
	mv -f "${tmp}/kube-apiserver" "${apiserver_bin}"
fi

echo "ETCD=${etcd_bin}"
echo "KUBE_APISERVER=${apiserver_bin}"
