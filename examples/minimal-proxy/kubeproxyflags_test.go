package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// kube-proxy v1.34's flags that minimal-proxy once refused, each with a
// value and what it must set.
func TestEveryKubeProxyFlag(t *testing.T) {
	for _, tc := range []struct {
		flag  string
		check func(o *options) bool
	}{
		{"--conntrack-max-per-core=0", func(o *options) bool { return *o.config.Conntrack.MaxPerCore == 0 }},
		{"--conntrack-min=1000", func(o *options) bool { return *o.config.Conntrack.Min == 1000 }},
		{"--conntrack-tcp-be-liberal", func(o *options) bool { return o.config.Conntrack.TCPBeLiberal }},
		{"--conntrack-tcp-timeout-close-wait=2m", func(o *options) bool {
			return o.config.Conntrack.TCPCloseWaitTimeout.Duration == 2*time.Minute
		}},
		{"--conntrack-tcp-timeout-established=0", func(o *options) bool {
			return o.config.Conntrack.TCPEstablishedTimeout.Duration == 0
		}},
		{"--conntrack-udp-timeout=30s", func(o *options) bool { return o.config.Conntrack.UDPTimeout.Duration == 30*time.Second }},
		{"--conntrack-udp-timeout-stream=2m", func(o *options) bool {
			return o.config.Conntrack.UDPStreamTimeout.Duration == 2*time.Minute
		}},
		{"--feature-gates=PreferSameTrafficDistribution=false,AllAlpha=false", func(o *options) bool {
			return reflect.DeepEqual(o.config.FeatureGates, map[string]bool{"PreferSameTrafficDistribution": false, "AllAlpha": false})
		}},
		{"--init-only", func(o *options) bool { return o.initOnly }},
		{"--write-config-to=/tmp/x.yaml", func(o *options) bool { return o.writeConfigTo == "/tmp/x.yaml" }},
		{"--version", func(o *options) bool { return o.version == "true" }},
		{"--version=raw", func(o *options) bool { return o.version == "raw" }},
		{"--oom-score-adj=-500", func(o *options) bool { return *o.config.OOMScoreAdj == -500 }},
		{"--kube-api-qps=50", func(o *options) bool { return o.config.ClientConnection.QPS == 50 }},
		{"--kube-api-burst=100", func(o *options) bool { return o.config.ClientConnection.Burst == 100 }},
		{"--kube-api-content-type=application/json", func(o *options) bool {
			return o.config.ClientConnection.ContentType == "application/json"
		}},
		{"--iptables-localhost-nodeports=false", func(o *options) bool { return !*o.config.IPTables.LocalhostNodePorts }},
		{"--ipvs-tcp-timeout=15m", func(o *options) bool { return o.config.IPVS.TCPTimeout.Duration == 15*time.Minute }},
		{"--ipvs-tcpfin-timeout=30s", func(o *options) bool { return o.config.IPVS.TCPFinTimeout.Duration == 30*time.Second }},
		{"--ipvs-udp-timeout=10s", func(o *options) bool { return o.config.IPVS.UDPTimeout.Duration == 10*time.Second }},
		{"--bind-address-hard-fail", func(o *options) bool { return o.config.BindAddressHardFail }},
		{"--profiling", func(o *options) bool { return o.config.EnableProfiling }},
		{"--show-hidden-metrics-for-version=1.33", func(o *options) bool { return o.config.ShowHiddenMetricsForVersion == "1.33" }},
		{"--logging-format=json", func(o *options) bool { return o.config.Logging.Format == "json" }},
		{"--vmodule=proxier*=4,sync=2", func(o *options) bool {
			return reflect.DeepEqual(o.config.Logging.VModule, []VModuleItem{{"proxier*", 4}, {"sync", 2}})
		}},
		{"--log-flush-frequency=10s", func(o *options) bool { return o.config.Logging.FlushFrequency.Duration == 10*time.Second }},
		{"--log-text-split-stream", func(o *options) bool { return o.config.Logging.Options.Text.SplitStream }},
		{"--log-text-info-buffer-size=64Ki", func(o *options) bool {
			return o.config.Logging.Options.Text.InfoBufferSize.Cmp(resource.MustParse("64Ki")) == 0
		}},
		{"--log-json-split-stream", func(o *options) bool { return o.config.Logging.Options.JSON.SplitStream }},
		{"--log-json-info-buffer-size=1Mi", func(o *options) bool {
			return o.config.Logging.Options.JSON.InfoBufferSize.Cmp(resource.MustParse("1Mi")) == 0
		}},
		{"--boot-id-file=/proc/sys/kernel/random/boot_id", func(o *options) bool { return strings.Contains(strings.Join(o.noEffect, " "), "--boot-id-file") }},
		{"--machine-id-file=/etc/machine-id", func(o *options) bool { return strings.Contains(strings.Join(o.noEffect, " "), "--machine-id-file") }},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := parseOptions([]string{tc.flag}, "linux", &stderr)
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			if !tc.check(o) {
				t.Errorf("%s did not set what it names", tc.flag)
			}
			if stderr.Len() > 0 {
				t.Errorf("a current flag printed: %s", stderr.String())
			}
		})
	}
}

// The older table's flags still parse, each printing one deprecation line.
func TestDeprecatedFlagAliases(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(o *options) bool
	}{
		{[]string{"--cleanup-iptables"}, func(o *options) bool { return o.cleanup }},
		{[]string{"--healthz-port=0"}, func(o *options) bool { return o.config.HealthzBindAddress == "" }},
		{[]string{"--healthz-port=12345"}, func(o *options) bool { return o.config.HealthzBindAddress == "0.0.0.0:12345" }},
		{[]string{"--metrics-port=0"}, func(o *options) bool { return o.config.MetricsBindAddress == "" }},
		{[]string{"--alsologtostderr"}, func(o *options) bool { return true }},
		{[]string{"--log-dir=/var/log"}, func(o *options) bool { return true }},
		{[]string{"--config=testdata/kube-proxy-config.yaml", "--healthz-port=4444"}, func(o *options) bool {
			return o.config.HealthzBindAddress == "0.0.0.0:4444"
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := parseOptions(tc.args, "linux", &stderr)
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			if !tc.check(o) {
				t.Errorf("%v did not do what kube-proxy's flag did: %+v", tc.args, o.config)
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], "deprecated") {
				t.Errorf("want one deprecation line, got %q", stderr.String())
			}
		})
	}
}

// kube-proxy's DaemonSet command line (kubeadm's, plus the flags of the
// common manifests) runs a dry run, as does the older flag set.
func TestKubeProxyDaemonSetCommandLine(t *testing.T) {
	for name, args := range map[string][]string{
		"v1.34": {"--config=" + filepath.Join("testdata", "kube-proxy-config-objects.yaml"), "--hostname-override=node-a",
			"--conntrack-max-per-core=0", "--v=2", "--feature-gates=PreferSameTrafficDistribution=true,ServiceTrafficDistribution=true",
			"--kube-api-qps=20", "--oom-score-adj=-999", "--logging-format=text", "--objects-file=demo.yaml"},
		"older": {"--objects-file=demo.yaml", "--cleanup-iptables=false", "--healthz-port=10256", "--alsologtostderr",
			"--log-dir=/var/log/kube-proxy", "--conntrack-max-per-core=0", "--v=2"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runInProcess(t, context.Background(), append(args, "--dry-run")...)
			if code != exitOK || !strings.Contains(out, "*nat") {
				t.Fatalf("exit %d, stdout %.200q, stderr:\n%s", code, out, errOut)
			}
		})
	}
}

func TestFeatureGates(t *testing.T) {
	for _, tc := range []struct {
		gates   string
		wantErr string
	}{
		{"PreferSameTrafficDistribution=false", ""},
		{"ServiceTrafficDistribution=true", ""}, // GA, locked to true
		{"ServiceTrafficDistribution=false", "locked to true"},
		{"NoSuchGate=true", "unrecognized feature gate"},
		{"ContextualLogging=false,LoggingBetaOptions=true", ""},
	} {
		_, err := parseOptions([]string{"--feature-gates=" + tc.gates}, "linux", &bytes.Buffer{})
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("--feature-gates=%s: err = %v, want %q", tc.gates, err, tc.wantErr)
		}
	}
	// The same in the configuration file.
	p := writeFile(t, "kp.yaml", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nfeatureGates:\n  NoSuchGate: true\n")
	if _, err := parseOptions([]string{"--config=" + p}, "linux", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "featureGates") {
		t.Errorf("unknown gate in the file: err = %v", err)
	}
	// A gate set away from its default is logged once.
	code, _, errOut := runInProcess(t, context.Background(), "--objects-file=demo.yaml", "--dry-run", "--feature-gates=PreferSameTrafficDistribution=false")
	if code != exitOK || strings.Count(errOut, "PreferSameTrafficDistribution=false") != 1 {
		t.Errorf("exit %d; want the gate logged once:\n%s", code, errOut)
	}
}

// --write-config-to writes the effective configuration, which --config
// reads back to the same configuration.
func TestWriteConfigTo(t *testing.T) {
	out := filepath.Join(t.TempDir(), "written.yaml")
	args := []string{"--config=testdata/kube-proxy-config.yaml", "--conntrack-max-per-core=0", "--feature-gates=AllBeta=false",
		"--logging-format=json", "--ipvs-tcp-timeout=5m", "--kube-api-burst=77"}
	code, _, errOut := runInProcess(t, context.Background(), append(args, "--write-config-to="+out)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want, err := parseOptions(args, "linux", &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseOptions([]string{"--config=" + out}, "linux", &bytes.Buffer{})
	if err != nil {
		t.Fatalf("reading the written file back: %v\n%s", err, string(mustRead(t, out)))
	}
	gj, _ := json.Marshal(got.config)
	wj, _ := json.Marshal(want.config)
	if string(gj) != string(wj) {
		t.Errorf("written configuration differs:\n got %s\nwant %s", gj, wj)
	}
	if *got.config.Conntrack.MaxPerCore != 0 || got.config.ClientConnection.Burst != 77 || got.config.Logging.Format != "json" {
		t.Errorf("flags missing from the written file:\n%s", string(mustRead(t, out)))
	}
}

func TestVersion(t *testing.T) {
	// The client libraries this binary links: go.mod's v0.34, or v0.37
	// under hack/clientlibs.sh.
	apiMinor, clientGoMinor := "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			minor, _, _ := strings.Cut(strings.TrimPrefix(d.Version, "v0."), ".")
			switch d.Path {
			case "k8s.io/api":
				apiMinor = minor
			case "k8s.io/client-go":
				clientGoMinor = minor
			}
		}
	}
	if apiMinor == "" || clientGoMinor == "" {
		t.Fatal("no k8s.io/api or k8s.io/client-go in the test binary's build info")
	}
	code, out, _ := runInProcess(t, context.Background(), "--version")
	if code != exitOK || !strings.HasPrefix(out, "minimal-proxy (svcproxy) ") || !strings.Contains(out, "Kubernetes v1."+apiMinor+".") {
		t.Errorf("--version: exit %d, %q, want Kubernetes v1.%s", code, out, apiMinor)
	}
	code, out, _ = runInProcess(t, context.Background(), "--version=raw")
	if code != exitOK || !strings.Contains(out, "k8s.io/client-go v0."+clientGoMinor+".") {
		t.Errorf("--version=raw: exit %d, %q, want k8s.io/client-go v0.%s", code, out, clientGoMinor)
	}
}

// Log lines are key/value (text) or JSON objects, with the logger's name
// under the "logger" key rather than as a bare prefix; split streams send
// info lines to stdout.
func TestLogFormats(t *testing.T) {
	var stdout, stderr bytes.Buffer
	log := newLogger(&stdout, &stderr, LoggingConfig{Format: "text"}).WithName("healthz")
	log.Info("serving", "address", "127.0.0.1:10256")
	line := stderr.String()
	if !strings.HasPrefix(line, `"ts"=`) || !strings.Contains(line, `"logger"="healthz" "level"=0 "msg"="serving" "address"="127.0.0.1:10256"`) {
		t.Errorf("text line: %q", line)
	}

	stdout.Reset()
	stderr.Reset()
	log = newLogger(&stdout, &stderr, LoggingConfig{Format: "json", Options: FormatOptions{JSON: OutputRoutingOptions{SplitStream: true}}}).WithName("iptables")
	log.Info("synced", "rules", 3)
	log.Error(context.Canceled, "failed")
	var info, failure map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil || info["logger"] != "iptables" || info["msg"] != "synced" {
		t.Errorf("json info line on stdout: %q (%v)", stdout.String(), err)
	}
	if err := json.Unmarshal(stderr.Bytes(), &failure); err != nil || failure["error"] != "context canceled" {
		t.Errorf("json error line on stderr: %q (%v)", stderr.String(), err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
