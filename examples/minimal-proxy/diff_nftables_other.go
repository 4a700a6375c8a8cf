//go:build !linux

package main

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
)

type planLister func(ctx context.Context, family v1.IPFamily, plan string) (string, error)

// diffNFTablesPlan: the nftables mode is Linux only.
func diffNFTablesPlan(ctx context.Context, plan string, run toolRunner, listPlan planLister) ([]string, error) {
	return nil, errors.New("diff: the nftables mode is Linux only")
}

func listPlanInScratchNetns(ctx context.Context, family v1.IPFamily, plan string) (string, error) {
	return "", errors.New("diff: the nftables mode is Linux only")
}
