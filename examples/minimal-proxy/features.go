package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// featureGateSpec is one kube-proxy feature gate: its default, and whether
// it is locked to that default (setting it the other way is an error, as in
// kube-proxy).
type featureGateSpec struct {
	defaultValue bool
	locked       bool
	stage        string // ALPHA, BETA, GA or DEPRECATED
}

// featureGatesFlag is --feature-gates: comma-separated Name=bool pairs
// merged into a map (kube-proxy's mapStringBool).
type featureGatesFlag struct{ m *map[string]bool }

func (f featureGatesFlag) String() string {
	if f.m == nil || len(*f.m) == 0 {
		return ""
	}
	var pairs []string
	for _, k := range sortedKeys(*f.m) {
		pairs = append(pairs, fmt.Sprintf("%s=%t", k, (*f.m)[k]))
	}
	return strings.Join(pairs, ",")
}

func (f featureGatesFlag) Set(s string) error {
	if *f.m == nil {
		*f.m = map[string]bool{}
	}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("%q: want Name=true or Name=false", pair)
		}
		b, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			return fmt.Errorf("%q: %q is not a boolean", pair, value)
		}
		(*f.m)[strings.TrimSpace(name)] = b
	}
	return nil
}

func (featureGatesFlag) Type() string { return "mapStringBool" }

// validateFeatureGates refuses what kube-proxy refuses: a gate it does not
// know, and a locked gate set against its locked value.
func validateFeatureGates(gates map[string]bool) error {
	var errs []error
	for _, name := range sortedKeys(gates) {
		spec, ok := kubeProxyFeatureGates[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("unrecognized feature gate %q (kube-proxy v1.34 does not know it either)", name))
		case spec.locked && gates[name] != spec.defaultValue:
			errs = append(errs, fmt.Errorf("cannot set feature gate %s to %t: it is locked to %t", name, gates[name], spec.defaultValue))
		}
	}
	return errors.Join(errs...)
}

// gateLocalhostNodePorts is kube-proxy v1.37's gate for localhost node
// ports in the nftables mode (nftables.Config.LocalhostNodePorts).
const gateLocalhostNodePorts = "KubeProxyNFTablesLocalhostNodePorts"

// gatedFeatures are the gates that change what svcproxy does; every other
// gate is accepted without effect.
var gatedFeatures = map[string]bool{gateLocalhostNodePorts: true}

// featureEnabled reports whether gate is on: its own setting, else
// AllAlpha's or AllBeta's for a gate of that stage (as
// k8s.io/component-base's feature gates), else its default.
func featureEnabled(gates map[string]bool, gate string) bool {
	if v, ok := gates[gate]; ok {
		return v
	}
	spec := kubeProxyFeatureGates[gate]
	switch spec.stage {
	case "ALPHA":
		if v, ok := gates["AllAlpha"]; ok {
			return v
		}
	case "BETA":
		if v, ok := gates["AllBeta"]; ok {
			return v
		}
	}
	return spec.defaultValue
}

// logFeatureGates says, once at start, which gates given change nothing
// here: apart from gatedFeatures, svcproxy implements the behaviour
// kube-proxy v1.34 has with its gates at their defaults.
func logFeatureGates(gates map[string]bool, log logr.Logger) {
	var set []string
	for _, name := range sortedKeys(gates) {
		if gatedFeatures[name] {
			continue
		}
		if gates[name] != kubeProxyFeatureGates[name].defaultValue {
			set = append(set, fmt.Sprintf("%s=%t", name, gates[name]))
		}
	}
	if len(set) > 0 {
		log.Info("Feature gates accepted but without effect: svcproxy has no behaviour behind them", "featureGates", strings.Join(set, ","))
	}
}
