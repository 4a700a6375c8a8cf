package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigFileKubeadm(t *testing.T) {
	o, err := parseOptions([]string{"--config", "testdata/kube-proxy-config.yaml"}, "linux", io.Discard)
	if err != nil {
		t.Fatalf("parseOptions: %v", err)
	}
	c := o.config
	if got := *c.IPTables.MasqueradeBit; got != 12 {
		t.Errorf("masqueradeBit = %d, want 12", got)
	}
	if c.IPTables.SyncPeriod.Duration != 45*time.Second || c.IPTables.MinSyncPeriod.Duration != 2*time.Second {
		t.Errorf("iptables periods = %v/%v, want 45s/2s", c.IPTables.SyncPeriod, c.IPTables.MinSyncPeriod)
	}
	if c.ClientConnection.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" || c.ClientConnection.QPS != 10 || c.ClientConnection.Burst != 20 {
		t.Errorf("clientConnection = %+v", c.ClientConnection)
	}
	if c.ClusterCIDR != "10.244.0.0/16" || c.Mode != "iptables" || c.Logging.Verbosity != 2 {
		t.Errorf("clusterCIDR/mode/verbosity = %q/%q/%d", c.ClusterCIDR, c.Mode, c.Logging.Verbosity)
	}
	// A field the file leaves out keeps kube-proxy's default.
	if c.UDPIdleTimeout.Duration != 250*time.Millisecond {
		t.Errorf("udpIdleTimeout = %v, want the 250ms default", c.UDPIdleTimeout)
	}
}

func TestFlagsOverrideConfigFile(t *testing.T) {
	o, err := parseOptions([]string{
		"--config=testdata/kube-proxy-config.yaml",
		"--iptables-masquerade-bit=3", "--proxy-mode", "userspace", "--cluster-cidr=10.0.0.0/8,fd00::/64",
		"--nodeport-addresses=192.168.0.0/16,10.1.0.0/16", "--v=4", "--kubeconfig=/k",
	}, "linux", io.Discard)
	if err != nil {
		t.Fatalf("parseOptions: %v", err)
	}
	c := o.config
	if *c.IPTables.MasqueradeBit != 3 || c.Mode != "userspace" || c.ClusterCIDR != "10.0.0.0/8,fd00::/64" || c.Logging.Verbosity != 4 || c.ClientConnection.Kubeconfig != "/k" {
		t.Errorf("flags did not override: bit=%d mode=%q cidr=%q v=%d kubeconfig=%q", *c.IPTables.MasqueradeBit, c.Mode, c.ClusterCIDR, c.Logging.Verbosity, c.ClientConnection.Kubeconfig)
	}
	if strings.Join(c.NodePortAddresses, " ") != "192.168.0.0/16 10.1.0.0/16" {
		t.Errorf("nodePortAddresses = %q", c.NodePortAddresses)
	}
	// Flags not given leave the file's values alone, even where the flag's
	// default differs from the file.
	if c.IPTables.SyncPeriod.Duration != 45*time.Second {
		t.Errorf("iptables.syncPeriod = %v, want the file's 45s", c.IPTables.SyncPeriod)
	}
}

func TestDefaultsWithoutConfigFile(t *testing.T) {
	o, err := parseOptions(nil, "linux", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.config
	if *c.IPTables.MasqueradeBit != 14 || c.IPTables.SyncPeriod.Duration != 30*time.Second || c.IPTables.MinSyncPeriod.Duration != time.Second ||
		c.HealthzBindAddress != "0.0.0.0:10256" || c.MetricsBindAddress != "127.0.0.1:10249" || c.BindAddress != "0.0.0.0" ||
		c.ConfigSyncPeriod.Duration != 15*time.Minute || c.OOMScoreAdj == nil || *c.OOMScoreAdj != -999 {
		t.Errorf("defaults differ from kube-proxy's: %+v", c)
	}
}

// Every refused setting is named in the error.
func TestRefusedSettings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		file    string
		goos    string
		wantErr []string
	}{
		{name: "masquerade bit too large", args: []string{"--iptables-masquerade-bit=32"}, wantErr: []string{"iptables.masqueradeBit", "0..31"}},
		{name: "masquerade bit negative", args: []string{"--iptables-masquerade-bit=-1"}, wantErr: []string{"iptables.masqueradeBit"}},
		{name: "bad cluster CIDR", args: []string{"--cluster-cidr=10.0.0.0/33"}, wantErr: []string{"clusterCIDR", "10.0.0.0/33"}},
		{name: "two IPv4 cluster CIDRs", args: []string{"--cluster-cidr=10.0.0.0/8,192.168.0.0/16"}, wantErr: []string{"clusterCIDR", "one IP family"}},
		{name: "port range malformed", args: []string{"--proxy-port-range=3000:4000"}, wantErr: []string{"portRange", "3000:4000"}},
		{name: "port range reversed", args: []string{"--proxy-port-range=4000-3000"}, wantErr: []string{"portRange"}},
		{name: "port range too high", args: []string{"--proxy-port-range=65000+1000"}, wantErr: []string{"portRange"}},
		{name: "kernelspace on linux", args: []string{"--proxy-mode=kernelspace"}, goos: "linux", wantErr: []string{"mode", "kernelspace", "Windows"}},
		{name: "winkernel alias on linux", args: []string{"--proxy-mode=winkernel"}, goos: "linux", wantErr: []string{"mode", "kernelspace", "Windows"}},
		{name: "iptables on windows", args: []string{"--proxy-mode=iptables"}, goos: "windows", wantErr: []string{"mode", "kernelspace"}},
		{name: "unknown mode", args: []string{"--proxy-mode=ebpf"}, wantErr: []string{"mode", "ebpf"}},
		{name: "nftables on windows", args: []string{"--proxy-mode=nftables"}, goos: "windows", wantErr: []string{"mode", "kernelspace"}},
		{name: "ipvs scheduler", args: []string{"--proxy-mode=ipvs", "--ipvs-scheduler=fastest"}, wantErr: []string{"ipvs.scheduler", "fastest"}},
		{name: "ipvs exclude cidr", args: []string{"--ipvs-exclude-cidrs=10.0.0.0/8,nope"}, wantErr: []string{"ipvs.excludeCIDRs[1]", "nope"}},
		{name: "nodeport addresses", args: []string{"--nodeport-addresses=10.0.0.1"}, wantErr: []string{"nodePortAddresses[0]"}},
		{name: "sync period zero", args: []string{"--iptables-sync-period=0s"}, wantErr: []string{"iptables.syncPeriod"}},
		{name: "min sync longer than sync", args: []string{"--iptables-min-sync-period=1m"}, wantErr: []string{"iptables.minSyncPeriod"}},
		{name: "healthz address", args: []string{"--healthz-bind-address=localhost:x"}, wantErr: []string{"healthzBindAddress"}},
		{name: "metrics address without port", args: []string{"--metrics-bind-address=127.0.0.1"}, wantErr: []string{"metricsBindAddress"}},
		{name: "bind address", args: []string{"--bind-address=eth0"}, wantErr: []string{"bindAddress", "eth0"}},
		{name: "udp timeout", args: []string{"--udp-timeout=0s"}, wantErr: []string{"udpIdleTimeout"}},
		{name: "exclude cluster cidr", args: []string{"--exclude-cluster-cidr=10.1.0.0/16,x"}, wantErr: []string{"--exclude-cluster-cidr", `"x"`}},
		{name: "bridge without interface", args: []string{"--detect-local-mode=BridgeInterface"}, wantErr: []string{"detectLocal.bridgeInterface"}},
		{name: "objects file with kubeconfig", args: []string{"--objects-file=x.yaml", "--kubeconfig=k"}, wantErr: []string{"--objects-file", "--kubeconfig"}},
		{name: "cleanup with dry run", args: []string{"--cleanup", "--dry-run"}, wantErr: []string{"--cleanup", "--dry-run"}},
		{name: "service proxy name not a label value", args: []string{"--service-proxy-name=not a label!"}, wantErr: []string{"--service-proxy-name"}},
		{name: "unknown flag", args: []string{"--proxy-mod=iptables"}, wantErr: []string{"proxy-mod"}},
		{name: "positional argument", args: []string{"iptables"}, wantErr: []string{"unexpected arguments"}},
		{name: "unknown top-level field", file: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmasqueradeAll: true\n", wantErr: []string{`"masqueradeAll"`}},
		{name: "unknown nested field", file: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\niptables:\n  masqueradeBits: 3\n", wantErr: []string{`"iptables.masqueradeBits"`}},
		{name: "wrong kind", file: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", wantErr: []string{"KubeletConfiguration", "KubeProxyConfiguration"}},
		{name: "missing apiVersion", file: "kind: KubeProxyConfiguration\nmode: iptables\n", wantErr: []string{"apiVersion"}},
		{name: "wrong type", file: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\niptables:\n  masqueradeBit: fourteen\n", wantErr: []string{"masqueradeBit"}},
		{name: "bad duration", file: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\niptables:\n  syncPeriod: soon\n", wantErr: []string{"soon"}},
		{name: "duplicate key", file: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nmode: iptables\n", wantErr: []string{"mode"}},
		{name: "not yaml", file: "{{{", wantErr: []string{"YAML"}},
		{name: "empty file", file: "\n", wantErr: []string{"empty"}},
		{name: "feature gates", file: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nfeatureGates:\n  Foo: true\n", wantErr: []string{"featureGates", "Foo"}},
		{name: "masquerade bit in file", file: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\niptables:\n  masqueradeBit: 40\n", wantErr: []string{"iptables.masqueradeBit"}},
		{name: "missing config file", args: []string{"--config=/nonexistent/kube-proxy.yaml"}, wantErr: []string{"/nonexistent/kube-proxy.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", writeFile(t, "config.yaml", tc.file)}, args...)
			}
			goos := tc.goos
			if goos == "" {
				goos = "linux"
			}
			_, err := parseOptions(args, goos, io.Discard)
			if err == nil {
				t.Fatalf("parseOptions(%q) succeeded, want an error mentioning %q", args, tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		in         string
		begin, end int
		ok         bool
	}{
		{"", 0, 0, true}, {"30000-32767", 30000, 32767, true}, {"2000+10", 2000, 2010, true},
		{"1-1", 1, 1, true}, {"0-10", 0, 0, false}, {"-5", 0, 0, false}, {"5-", 0, 0, false},
		{"a-b", 0, 0, false}, {"100", 0, 0, false}, {"1-65536", 0, 0, false},
	} {
		b, e, err := parsePortRange(tc.in)
		if (err == nil) != tc.ok || b != tc.begin || e != tc.end {
			t.Errorf("parsePortRange(%q) = %d, %d, %v; want %d, %d, ok=%v", tc.in, b, e, err, tc.begin, tc.end, tc.ok)
		}
	}
}
