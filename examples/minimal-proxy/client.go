package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// newClient builds the API client as kube-proxy does: --kubeconfig and/or
// --master, else the in-cluster configuration, with clientConnection's
// content types, QPS and burst.
func newClient(master string, cc ClientConnectionConfig) (kubernetes.Interface, *rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case cc.Kubeconfig == "" && master == "":
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, nil, fmt.Errorf("no --kubeconfig or --master given and not running in a cluster (%w); use --objects-file to run without an API server", err)
		}
	default:
		if cc.Kubeconfig != "" {
			if _, statErr := os.Stat(cc.Kubeconfig); statErr != nil {
				return nil, nil, fmt.Errorf("--kubeconfig (clientConnection.kubeconfig): %w", statErr)
			}
		}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cc.Kubeconfig},
			&clientcmd.ConfigOverrides{ClusterInfo: clientcmdClusterOverride(master)}).ClientConfig()
		if err != nil {
			return nil, nil, fmt.Errorf("--kubeconfig %q / --master %q: %w", cc.Kubeconfig, master, err)
		}
	}
	cfg.AcceptContentTypes = cc.AcceptContentTypes
	cfg.ContentType = cc.ContentType
	cfg.QPS = cc.QPS
	cfg.Burst = int(cc.Burst)
	cfg.UserAgent = "svcproxy-minimal-proxy"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("building the API client: %w", err)
	}
	return client, cfg, nil
}

// nodeNameFor returns --hostname-override, else the host name, lower-cased
// (kube-proxy's rule: Node names are lower case).
func nodeNameFor(override string) (string, error) {
	name := strings.TrimSpace(override)
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("no --hostname-override and the host name is unknown: %w", err)
		}
		name = h
	}
	name = strings.ToLower(name)
	if name == "" {
		return "", errors.New("empty node name: set --hostname-override")
	}
	return name, nil
}

func clientcmdClusterOverride(master string) clientcmdapi.Cluster {
	return clientcmdapi.Cluster{Server: master}
}
