package main

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
)

// cleanupAll removes what any proxy mode left on the node (ours or
// kube-proxy's).
func cleanupAll(ctx context.Context, log logr.Logger) error {
	_ = ctx
	_ = log
	return errors.New("--cleanup: not wired yet")
}
