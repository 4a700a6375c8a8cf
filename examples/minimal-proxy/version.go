package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// followedKubernetes is the Kubernetes minor whose kube-proxy flags,
// configuration file and API semantics this binary follows.
const followedKubernetes = "v1.34"

// versionFlag is --version: "true" (or bare) prints the versions and
// exits, "raw" prints the build details too, "false" does nothing (as
// kube-proxy's --version, which also takes "raw").
type versionFlag string

func (v *versionFlag) String() string { return string(*v) }

func (v *versionFlag) Set(s string) error {
	switch strings.ToLower(s) {
	case "true", "false", "raw":
		*v = versionFlag(strings.ToLower(s))
		return nil
	}
	return fmt.Errorf("%q: want true, false or raw", s)
}

func (*versionFlag) Type() string { return "version" }

func (*versionFlag) IsBoolFlag() bool { return true }

// printVersion writes ours and the Kubernetes version we follow: the
// k8s.io/api module we are built with (v0.34.x is Kubernetes v1.34.x).
func printVersion(w io.Writer, raw bool) {
	ours, revision := "(devel)", ""
	kubernetes := followedKubernetes
	var deps []string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			ours = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				revision = s.Value[:12]
			}
		}
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/api" && strings.HasPrefix(d.Version, "v0.") {
				kubernetes = "v1." + strings.TrimPrefix(d.Version, "v0.")
			}
			if strings.HasPrefix(d.Path, "k8s.io/") {
				deps = append(deps, d.Path+" "+d.Version)
			}
		}
	}
	if revision != "" {
		ours += " (" + revision + ")"
	}
	fmt.Fprintf(w, "minimal-proxy (svcproxy) %s, Kubernetes %s\n", ours, kubernetes)
	if raw {
		for _, d := range deps {
			fmt.Fprintln(w, d)
		}
	}
}
