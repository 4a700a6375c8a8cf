#!/usr/bin/env bash
# Prove the newest end of the client-library window: build, vet and run the
# unit tests of this module against k8s.io/api, k8s.io/apimachinery and
# k8s.io/client-go at VERSION (default v0.37.2), through a throw-away copy
# of go.mod and go.sum (go -modfile): the module's own go.mod keeps its
# minimum (v0.34), so embedders on v0.34 are not forced forward.
#
# Usage: hack/clientlibs.sh [VERSION]
#
# The tests run with -short (the real-kernel conformance tables and the
# end-to-end tests skip; they exercise the engines, not the client
# libraries) and without -race, to keep CI time down. .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

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
GOOS=windows # cgo off, as .ci/run's other compiles outside the race-enabled test run:
# the dependencies this version leaves unchanged come from the same cache.
export CGO_ENABLED=0
go build "${modfile}" ./...
go test "${modfile}" -short -count=1 ./...
