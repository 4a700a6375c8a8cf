//go:build !linux

package main

import (
	"context"
	"errors"
	"runtime"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
)

func buildNFTables(engineParams, v1.IPFamily) (*engine, error) {
	return nil, errors.New("the nftables mode needs Linux, not " + runtime.GOOS)
}

func probeNFTables() error { return errors.New("the nftables mode needs Linux, not " + runtime.GOOS) }

func cleanupNFTables(context.Context, logr.Logger) error { return nil }

func registerNFTablesMetrics(prometheus.Registerer, string, map[string]bool) error { return nil }
