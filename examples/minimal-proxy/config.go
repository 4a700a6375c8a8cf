package main

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The configuration file's group/version and kind, as kube-proxy's.
const (
	configAPIVersion = "kubeproxy.config.k8s.io/v1alpha1"
	configKind       = "KubeProxyConfiguration"
)

// KubeProxyConfiguration is kube-proxy's configuration file
// (kubeproxy.config.k8s.io/v1alpha1), decoded into our own struct so the
// binary does not depend on k8s.io/kube-proxy. The JSON names are
// upstream's; udpIdleTimeout comes from the older v1alpha1 that still had
// the userspace mode.
type KubeProxyConfiguration struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`

	FeatureGates                map[string]bool        `json:"featureGates,omitempty"`
	ClientConnection            ClientConnectionConfig `json:"clientConnection"`
	Logging                     LoggingConfig          `json:"logging"`
	HostnameOverride            string                 `json:"hostnameOverride"`
	BindAddress                 string                 `json:"bindAddress"`
	HealthzBindAddress          string                 `json:"healthzBindAddress"`
	MetricsBindAddress          string                 `json:"metricsBindAddress"`
	BindAddressHardFail         bool                   `json:"bindAddressHardFail"`
	EnableProfiling             bool                   `json:"enableProfiling"`
	ShowHiddenMetricsForVersion string                 `json:"showHiddenMetricsForVersion"`
	Mode                        string                 `json:"mode"`
	IPTables                    IPTablesConfig         `json:"iptables"`
	IPVS                        IPVSConfig             `json:"ipvs"`
	NFTables                    NFTablesConfig         `json:"nftables"`
	Winkernel                   WinkernelConfig        `json:"winkernel"`
	DetectLocalMode             string                 `json:"detectLocalMode"`
	DetectLocal                 DetectLocalConfig      `json:"detectLocal"`
	ClusterCIDR                 string                 `json:"clusterCIDR"`
	NodePortAddresses           []string               `json:"nodePortAddresses"`
	OOMScoreAdj                 *int32                 `json:"oomScoreAdj"`
	Conntrack                   ConntrackConfig        `json:"conntrack"`
	ConfigSyncPeriod            metav1.Duration        `json:"configSyncPeriod"`
	PortRange                   string                 `json:"portRange"`
	UDPIdleTimeout              metav1.Duration        `json:"udpIdleTimeout"`
	WindowsRunAsService         bool                   `json:"windowsRunAsService,omitempty"`
}

// ClientConnectionConfig is componentbaseconfig's ClientConnectionConfiguration.
type ClientConnectionConfig struct {
	Kubeconfig         string  `json:"kubeconfig"`
	AcceptContentTypes string  `json:"acceptContentTypes"`
	ContentType        string  `json:"contentType"`
	QPS                float32 `json:"qps"`
	Burst              int32   `json:"burst"`
}

// IPTablesConfig is the iptables section.
type IPTablesConfig struct {
	MasqueradeBit      *int32          `json:"masqueradeBit"`
	MasqueradeAll      bool            `json:"masqueradeAll"`
	LocalhostNodePorts *bool           `json:"localhostNodePorts"`
	SyncPeriod         metav1.Duration `json:"syncPeriod"`
	MinSyncPeriod      metav1.Duration `json:"minSyncPeriod"`
}

// IPVSConfig is the ipvs section.
type IPVSConfig struct {
	SyncPeriod    metav1.Duration `json:"syncPeriod"`
	MinSyncPeriod metav1.Duration `json:"minSyncPeriod"`
	Scheduler     string          `json:"scheduler"`
	ExcludeCIDRs  []string        `json:"excludeCIDRs"`
	StrictARP     bool            `json:"strictARP"`
	TCPTimeout    metav1.Duration `json:"tcpTimeout"`
	TCPFinTimeout metav1.Duration `json:"tcpFinTimeout"`
	UDPTimeout    metav1.Duration `json:"udpTimeout"`
}

// NFTablesConfig is the nftables section (used by mode nftables).
type NFTablesConfig struct {
	MasqueradeBit *int32          `json:"masqueradeBit"`
	MasqueradeAll bool            `json:"masqueradeAll"`
	SyncPeriod    metav1.Duration `json:"syncPeriod"`
	MinSyncPeriod metav1.Duration `json:"minSyncPeriod"`
}

// WinkernelConfig is the Windows section (used only by mode kernelspace).
type WinkernelConfig struct {
	NetworkName           string `json:"networkName"`
	SourceVip             string `json:"sourceVip"`
	EnableDSR             bool   `json:"enableDSR"`
	RootHnsEndpointName   string `json:"rootHnsEndpointName"`
	ForwardHealthCheckVip bool   `json:"forwardHealthCheckVip"`
}

// DetectLocalConfig is the detectLocal section.
type DetectLocalConfig struct {
	BridgeInterface     string `json:"bridgeInterface"`
	InterfaceNamePrefix string `json:"interfaceNamePrefix"`
}

// ConntrackConfig is the conntrack section. The binary validates it; the
// conntrack sysctls themselves are left to the node (see doc.go).
type ConntrackConfig struct {
	MaxPerCore            *int32           `json:"maxPerCore"`
	Min                   *int32           `json:"min"`
	TCPEstablishedTimeout *metav1.Duration `json:"tcpEstablishedTimeout"`
	TCPCloseWaitTimeout   *metav1.Duration `json:"tcpCloseWaitTimeout"`
	TCPBeLiberal          bool             `json:"tcpBeLiberal"`
	UDPTimeout            metav1.Duration  `json:"udpTimeout"`
	UDPStreamTimeout      metav1.Duration  `json:"udpStreamTimeout"`
}

// defaultConfig returns kube-proxy's defaults (SetDefaults_KubeProxyConfiguration).
func defaultConfig() *KubeProxyConfiguration {
	bit, nftBit := int32(14), int32(14)
	localhostNodePorts := true
	maxPerCore, minConntrack := int32(32*1024), int32(128*1024)
	oomScoreAdj := int32(-999)
	established := metav1.Duration{Duration: 24 * time.Hour}
	closeWait := metav1.Duration{Duration: time.Hour}
	return &KubeProxyConfiguration{
		APIVersion: configAPIVersion,
		Kind:       configKind,
		ClientConnection: ClientConnectionConfig{
			ContentType: "application/vnd.kubernetes.protobuf",
			QPS:         5,
			Burst:       10,
		},
		Logging: LoggingConfig{
			Format:         "text",
			FlushFrequency: flushFrequency{5 * time.Second},
		},
		BindAddress:        "0.0.0.0",
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		IPTables: IPTablesConfig{
			MasqueradeBit:      &bit,
			LocalhostNodePorts: &localhostNodePorts,
			SyncPeriod:         metav1.Duration{Duration: 30 * time.Second},
			MinSyncPeriod:      metav1.Duration{Duration: time.Second},
		},
		IPVS: IPVSConfig{
			SyncPeriod: metav1.Duration{Duration: 30 * time.Second},
		},
		NFTables: NFTablesConfig{
			MasqueradeBit: &nftBit,
			SyncPeriod:    metav1.Duration{Duration: 30 * time.Second},
			MinSyncPeriod: metav1.Duration{Duration: time.Second},
		},
		Conntrack: ConntrackConfig{
			MaxPerCore:            &maxPerCore,
			Min:                   &minConntrack,
			TCPEstablishedTimeout: &established,
			TCPCloseWaitTimeout:   &closeWait,
		},
		OOMScoreAdj:      &oomScoreAdj,
		ConfigSyncPeriod: metav1.Duration{Duration: 15 * time.Minute},
		UDPIdleTimeout:   metav1.Duration{Duration: 250 * time.Millisecond},
	}
}

// setDefaults fills what a configuration file left null, zero or empty
// as kube-proxy's v1alpha1 defaulting does (SetDefaults_KubeProxyConfiguration),
// so "maxPerCore: null", "syncPeriod: 0s" or "healthzBindAddress: \"\""
// in a kubeadm-written file mean kube-proxy's defaults here too.
func setDefaults(cfg *KubeProxyConfiguration) {
	def := defaultConfig()
	if cfg.BindAddress == "" {
		cfg.BindAddress = def.BindAddress
	}
	healthzHost, metricsHost := "0.0.0.0", "127.0.0.1"
	if a, err := netip.ParseAddr(cfg.BindAddress); err == nil && a.Is6() && !a.Is4In6() {
		healthzHost, metricsHost = "::", "::1"
	}
	cfg.HealthzBindAddress = addressOrDefault(cfg.HealthzBindAddress, healthzHost, 10256)
	cfg.MetricsBindAddress = addressOrDefault(cfg.MetricsBindAddress, metricsHost, 10249)
	if cfg.OOMScoreAdj == nil {
		cfg.OOMScoreAdj = def.OOMScoreAdj
	}
	if cfg.IPTables.SyncPeriod.Duration == 0 {
		cfg.IPTables.SyncPeriod = def.IPTables.SyncPeriod
	}
	if cfg.IPTables.MinSyncPeriod.Duration == 0 {
		cfg.IPTables.MinSyncPeriod = def.IPTables.MinSyncPeriod
	}
	if cfg.IPTables.LocalhostNodePorts == nil {
		cfg.IPTables.LocalhostNodePorts = def.IPTables.LocalhostNodePorts
	}
	if cfg.IPTables.MasqueradeBit == nil {
		cfg.IPTables.MasqueradeBit = def.IPTables.MasqueradeBit
	}
	if cfg.IPVS.SyncPeriod.Duration == 0 {
		cfg.IPVS.SyncPeriod = def.IPVS.SyncPeriod
	}
	if cfg.NFTables.MasqueradeBit == nil {
		cfg.NFTables.MasqueradeBit = def.NFTables.MasqueradeBit
	}
	if cfg.NFTables.SyncPeriod.Duration == 0 {
		cfg.NFTables.SyncPeriod = def.NFTables.SyncPeriod
	}
	if cfg.NFTables.MinSyncPeriod.Duration == 0 {
		cfg.NFTables.MinSyncPeriod = def.NFTables.MinSyncPeriod
	}
	if cfg.Conntrack.MaxPerCore == nil {
		cfg.Conntrack.MaxPerCore = def.Conntrack.MaxPerCore
	}
	if cfg.Conntrack.Min == nil {
		cfg.Conntrack.Min = def.Conntrack.Min
	}
	if cfg.Conntrack.TCPEstablishedTimeout == nil {
		cfg.Conntrack.TCPEstablishedTimeout = def.Conntrack.TCPEstablishedTimeout
	}
	if cfg.Conntrack.TCPCloseWaitTimeout == nil {
		cfg.Conntrack.TCPCloseWaitTimeout = def.Conntrack.TCPCloseWaitTimeout
	}
	if cfg.ConfigSyncPeriod.Duration == 0 {
		cfg.ConfigSyncPeriod = def.ConfigSyncPeriod
	}
	cc := &cfg.ClientConnection
	if cc.ContentType == "" {
		cc.ContentType = def.ClientConnection.ContentType
	}
	if cc.QPS == 0 {
		cc.QPS = def.ClientConnection.QPS
	}
	if cc.Burst == 0 {
		cc.Burst = def.ClientConnection.Burst
	}
	if cfg.Logging.Format == "" {
		cfg.Logging.Format = def.Logging.Format
	}
	if cfg.Logging.FlushFrequency.Duration == 0 {
		cfg.Logging.FlushFrequency = def.Logging.FlushFrequency
	}
}

// addressOrDefault is kube-proxy's defaulting of a bind address: empty is
// host:port, a bare IP gets port.
func addressOrDefault(addr, host string, port int) string {
	if addr == "" {
		return net.JoinHostPort(host, strconv.Itoa(port))
	}
	if a, err := netip.ParseAddr(addr); err == nil {
		return net.JoinHostPort(a.String(), strconv.Itoa(port))
	}
	return addr
}

// loadConfigFile reads a KubeProxyConfiguration file over kube-proxy's
// defaults. Decoding is strict: an unknown field is an error naming its
// path (e.g. "iptables.masqueradeBits"), as is a duplicate key or a value
// of the wrong type.
func loadConfigFile(path string) (*KubeProxyConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	cfg, err := decodeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

func decodeConfig(data []byte) (*KubeProxyConfiguration, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("empty file: want a %s %s document", configAPIVersion, configKind)
	}
	// First as a generic tree, to name unknown fields by their full path
	// (encoding/json only says the last key) and to check the type header.
	var tree map[string]any
	if err := yaml.Unmarshal(data, &tree); err != nil {
		return nil, fmt.Errorf("not a YAML or JSON object: %w", err)
	}
	apiVersion, _ := tree["apiVersion"].(string)
	kind, _ := tree["kind"].(string)
	if apiVersion != configAPIVersion || kind != configKind {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want apiVersion %s, kind %s", apiVersion, kind, configAPIVersion, configKind)
	}
	if unknown := unknownFields(tree, reflect.TypeOf(KubeProxyConfiguration{}), ""); len(unknown) > 0 {
		return nil, fmt.Errorf("unknown field %s", strings.Join(quoteAll(unknown), ", "))
	}
	cfg := defaultConfig()
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	setDefaults(cfg)
	return cfg, nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// unknownFields walks a decoded JSON tree against a struct type's json tags
// and returns the dotted paths of keys the struct has no field for. Values
// held as raw JSON (json.RawMessage) are not walked.
func unknownFields(tree map[string]any, t reflect.Type, prefix string) []string {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
	}
	var unknown []string
	for key, value := range tree {
		ft, ok := fields[key]
		if !ok {
			unknown = append(unknown, prefix+key)
			continue
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		sub, isMap := value.(map[string]any)
		if isMap && ft.Kind() == reflect.Struct && ft != reflect.TypeOf(metav1.Duration{}) {
			unknown = append(unknown, unknownFields(sub, ft, prefix+key+".")...)
		}
	}
	sort.Strings(unknown)
	return unknown
}

// writeConfig writes cfg, the effective configuration, to path as a
// KubeProxyConfiguration document that --config reads back unchanged
// (--write-config-to).
func writeConfig(path string, cfg *KubeProxyConfiguration) error {
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("--write-config-to: encoding: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("--write-config-to: %w", err)
	}
	return nil
}
