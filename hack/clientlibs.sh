#!/usr/bin/env bash
# Prove the newest end of the client-library window: build, vet and run the
# unit tests of this module against k8s.io/api, k8s.io/apimachinery and
# k8s.io/client-go at VERSION (default v0.37.2), through a throw-away copy
# of go.mod and go.sum (go -modfile): the module's own go.mod keeps its
# minimum (v0.34), so embedders on v0.34 are not forced forward.
#
# Usage: hack/clientlibs.sh [--build-only] [VERSION]
#
# --build-only does everything but run the tests: it builds and vets, and
# compiles and links the test binaries without running them (go test
# -exec true). .ci/run starts it beside its main test run, where it uses
# the cores the tests leave idle, and runs the whole script after: the
# builds are then in Go's build cache and only the tests run, so nothing
# of this check runs on the host beside the main tests' kernel tests.
#
# The tests run with -short (the real-kernel conformance tables and the
# end-to-end tests skip; they exercise the engines, not the client
# libraries) and without -race, to keep CI time down. .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=false
if [ "${1:-}" = --build-only ]; then build_only=true; shift; fi
version="${1:-v0.37.2}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
cp go.mod go.sum "${tmp}/"
modfile="-modfile=${tmp}/go.mod"

go get "${modfile}" "k8s.io/api@${version}" "k8s.io/apimachinery@${version}" "k8s.io/client-go@${version}"
go mod tidy "${modfile}"
# What the copy resolved to, for the log.
go list "${modfile}" -m k8s.io/api k8s.io/apimachinery k8s.io/client-go
# cgo off, as .ci/run's other compiles outside the race-enabled test run:
# the dependencies this version leaves unchanged come from the same cache.
export CGO_ENABLED=0
go build "${modfile}" ./...
go vet "${modfile}" ./...
GOOS=windows go build "${modfile}" ./...
if "${build_only}"; then
  go test "${modfile}" -short -count=1 -exec true ./... >/dev/null
  exit 0
fi
go test "${modfile}" -short -count=1 ./...
