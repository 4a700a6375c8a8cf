package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/proxy"
	enginebase "github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/healthcheck"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // runtime failure
	exitUsage  = 2 // bad flags or configuration
)

// shutdownGrace bounds how long servers may take to stop after SIGTERM.
const shutdownGrace = 500 * time.Millisecond

func main() {
	stdlog.SetFlags(0)
	stdlog.SetOutput(stdLog)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole binary: parse, set up, serve until ctx ends (SIGTERM or
// SIGINT), shut down. It returns the exit code. Every error is printed
// once: a usage error as one "minimal-proxy: …" line, anything later as
// one error log line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if code, ok := runSubcommand(ctx, args, stdout, stderr); ok {
		return code
	}
	o, err := parseOptions(args, runtime.GOOS, stderr)
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "minimal-proxy: %v\n", err)
		return exitUsage
	}
	if o.version == "true" || o.version == "raw" {
		printVersion(stdout, o.version == "raw")
		return exitOK
	}
	log := newLogger(stdout, stderr, o.config.Logging)
	klog.SetLogger(log.WithName("client-go"))
	stdLog.set(log)
	logFeatureGates(o.config.FeatureGates, log)
	if len(o.noEffect) > 0 {
		log.Info("Settings accepted for kube-proxy compatibility but without effect here", "settings", o.noEffect)
	}

	switch {
	case o.writeConfigTo != "":
		if err := writeConfig(o.writeConfigTo, o.config); err != nil {
			log.Error(err, "Could not write the configuration")
			return exitFailed
		}
		log.Info("Wrote configuration", "file", o.writeConfigTo)
		return exitOK
	case o.cleanup:
		if err := checkPrivileges(o.privileges); err != nil {
			log.Error(err, "Cannot clean up this node")
			return exitFailed
		}
		clean := func() error { return cleanupAll(ctx, o, log) }
		if runtime.GOOS == "windows" {
			// The HNS mode's load balancers and remote endpoints: the
			// only mode there is.
			clean = func() error {
				return cleanupWinkernel(ctx, engineParams{mode: modeKernelspace, opts: o, log: log})
			}
		}
		if err := clean(); err != nil {
			log.Error(err, "Cleanup left something behind")
			return exitFailed
		}
		log.Info("Cleanup done")
		return exitOK
	case o.initOnly:
		err := initNode(o.config, log)
		if runtime.GOOS == "linux" {
			err = errors.Join(err, initLocalhostNodePorts(o.config, procSysctls{}, log))
		}
		if err != nil {
			log.Error(err, "Initialization failed")
			return exitFailed
		}
		log.Info("Initialization done; the proxy now needs only CAP_NET_ADMIN")
		return exitOK
	}

	if err := serve(ctx, o, stdout, log); err != nil {
		log.Error(err, "Exiting")
		return exitFailed
	}
	return exitOK
}

// initNode applies the settings that need full root (--init-only, and
// the start of a real run): the OOM score and the conntrack sysctls.
// What could not be set is returned (applyConntrack has logged it as a
// warning); a real run carries on without it.
func initNode(cfg *KubeProxyConfiguration, log logr.Logger) error {
	adjustOOMScore(cfg.OOMScoreAdj, log)
	if runtime.GOOS != "linux" {
		return nil
	}
	return applyConntrack(cfg.Conntrack, procSysctls{}, numCPU(), log.WithName("conntrack"))
}

// initLocalhostNodePorts sets route_localnet for --init-only, as
// kube-proxy's iptables proxier does at construction (which --init-only
// runs), when the iptables mode will serve node ports on 127.0.0.1. A
// running engine sets it itself at each full sync.
func initLocalhostNodePorts(cfg *KubeProxyConfiguration, sys iptables.Sysctl, log logr.Logger) error {
	if cfg.Mode != "" && cfg.Mode != modeIPTables {
		return nil
	}
	npa, err := nodePortAddresses(cfg.NodePortAddresses, nil)
	if err != nil {
		return err
	}
	icfg := iptables.Config{
		Common: enginebase.Common{IPFamily: v1.IPv4Protocol},
		Netfilter: enginebase.Netfilter{
			NodePortAddresses: npa,
		},
		LocalhostNodePorts: cfg.IPTables.LocalhostNodePorts == nil || *cfg.IPTables.LocalhostNodePorts,
	}
	if !icfg.ServesLocalhostNodePorts() {
		return nil
	}
	if v, err := sys.Get(iptables.SysctlRouteLocalnet); err == nil && v == 1 {
		return nil
	}
	log.Info("Setting route_localnet=1 to allow node ports on localhost; to change this either turn off localhost node ports (--iptables-localhost-nodeports=false) or set node port addresses (--nodeport-addresses) that leave out loopback")
	if err := sys.Set(iptables.SysctlRouteLocalnet, 1); err != nil {
		log.Info("Warning: could not set a sysctl; leaving it as is", "name", iptables.SysctlRouteLocalnet, "want", 1, "err", err.Error())
		return fmt.Errorf("setting %s: %w", iptables.SysctlRouteLocalnet, err)
	}
	return nil
}

// dryRunAPIWait bounds how long a dry run waits for the API server.
const dryRunAPIWait = 45 * time.Second

// dryRunAgainstAPI is the dry run with objects from the API server.
func dryRunAgainstAPI(ctx context.Context, o *options, mode, nodeName string, src source, stdout io.Writer, log logr.Logger) error {
	node, err := src.node(ctx)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return dryRun(ctx, o, mode, nodeName, node, nodeAddresses(node, o.config.BindAddress, log), src, stdout, log)
}

// serve runs the proxy (or, with --dry-run, prints its plan) until ctx ends.
func serve(ctx context.Context, o *options, stdout io.Writer, log logr.Logger) error {
	cfg := o.config
	// Where objects come from: a file, or the API server.
	src, nodeName, err := newSource(o, log)
	if err != nil {
		return err
	}
	log = log.WithValues("node", nodeName)

	if o.dryRun {
		// No probing: a dry run shows the requested mode's plan even on a
		// machine without iptables or IPVS.
		mode := cfg.Mode
		if mode == "" {
			mode = modeIPTables
		}
		if o.objectsFile == "" {
			// A dry run is a one-shot command: it gives up on an API
			// server that does not answer instead of retrying forever.
			wait := o.dryRunAPIWait
			if wait <= 0 {
				wait = dryRunAPIWait
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, wait)
			defer cancel()
			err := dryRunAgainstAPI(ctx, o, mode, nodeName, src, stdout, log)
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("dry run: the API server did not deliver this node's Services and EndpointSlices within %v; is it reachable? (%w)", wait, err)
			}
			return err
		}
		node, err := src.node(ctx)
		if err != nil {
			return err
		}
		return dryRun(ctx, o, mode, nodeName, node, nodeAddresses(node, cfg.BindAddress, log), src, stdout, log)
	}

	// Nothing below works without the right to program the node: say so
	// once and stop, instead of retrying forever.
	if err := checkPrivileges(o.privileges); err != nil {
		return err
	}
	requested := cfg.Mode
	if requested == "" && runtime.GOOS == "windows" {
		requested = modeKernelspace // kube-proxy's default there; not in this build yet
	}
	mode := chooseMode(requested, modeProbes{ipvs: probeIPVS(cfg.IPVS.Scheduler), iptables: probeIPTables}, log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New()
	if err := m.Register(reg); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if err := registerNFTablesMetrics(reg, mode, cfg.FeatureGates); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if fs, ok := src.(*fileSource); ok {
		if err := fs.registerMetrics(reg); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	health := healthcheck.NewProxyHealthServer(healthcheck.ProxyHealthConfig{
		Addr:          cfg.HealthzBindAddress,
		HealthTimeout: 2 * syncPeriodOf(cfg, mode),
		// With an objects file that has no Node, nothing would ever make
		// the node eligible.
		AssumeNodeEligible: o.objectsFile != "",
		Metrics:            m,
		Logger:             log.WithName("healthz"),
	})
	// Serve health first: it answers 503 until the first sync, which is
	// what a supervisor should see while the API server is unreachable.
	servers, err := startServers(ctx, cfg, mode, reg, health, log)
	if err != nil {
		return err
	}
	stopServers := func() {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer stopCancel()
		servers.shutdown(stopCtx)
	}

	// The node's addresses decide the IP family and the node IP.
	node, err := src.node(ctx)
	if err != nil {
		stopServers()
		return err
	}
	if ctx.Err() != nil { // SIGTERM while waiting for the API server
		stopServers()
		log.Info("Stopped before the first sync")
		return nil
	}
	nodeIPs := nodeAddresses(node, cfg.BindAddress, log)
	eng, err := buildEngine(ctx, engineParams{
		mode: mode, opts: o, nodeName: nodeName, nodeIPs: nodeIPs, node: node,
		metrics: m, health: health, log: log,
	})
	if err != nil {
		stopServers()
		return err
	}
	_ = initNode(cfg, log) // each failure logged as a warning; not fatal, as kube-proxy in a container

	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errCh := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := eng.proxier.Run(runCtx); err != nil && runCtx.Err() == nil {
			errCh <- fmt.Errorf("%s proxier: %w", eng.mode, err)
		}
	}()
	go func() {
		defer wg.Done()
		// A service none of whose cluster IPs is of a family an engine
		// serves is logged (once, V(2)) and counted by the engine's
		// change tracker (changetracker.Tracker.OtherFamily).
		h := handlers{Provider: eng.proxier, health: health}
		if err := src.run(runCtx, h); err != nil && runCtx.Err() == nil {
			errCh <- fmt.Errorf("object source: %w", err)
		}
	}()
	log.Info("Proxy running", "mode", eng.mode, "nodeIPs", nodeIPs)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("Shutting down: rules are left in place for the next start to adopt")
	case runErr = <-errCh:
	}
	cancel()
	wg.Wait()
	stopServers()
	eng.close()
	log.Info("Stopped")
	return runErr
}

// handlers is what the object source feeds: the engine, plus the health
// server for the node's own events (a deleted or tainted node fails
// /healthz, as in kube-proxy).
type handlers struct {
	proxy.Provider
	health *healthcheck.ProxyHealthServer
}

func (h handlers) OnNodeAdd(n *v1.Node) {
	h.health.OnNodeAdd(n)
	h.Provider.OnNodeAdd(n)
}

func (h handlers) OnNodeUpdate(old, n *v1.Node) {
	h.health.OnNodeUpdate(old, n)
	h.Provider.OnNodeUpdate(old, n)
}

func (h handlers) OnNodeDelete(n *v1.Node) {
	h.health.OnNodeDelete(n)
	h.Provider.OnNodeDelete(n)
}

// servers are the healthz and metrics HTTP servers.
type servers struct {
	healthz, metrics *httpServer
}

// startServers starts the healthz server (/healthz, /livez) and the
// metrics server (/metrics, /proxyMode). A listen failure is fatal only
// with bindAddressHardFail, as in kube-proxy.
func startServers(ctx context.Context, cfg *KubeProxyConfiguration, mode string, reg *prometheus.Registry, health *healthcheck.ProxyHealthServer, log logr.Logger) (*servers, error) {
	var s servers
	var err error
	s.healthz, err = serveHTTP("healthz", cfg.HealthzBindAddress, health.Handler(), log)
	if err != nil {
		if cfg.BindAddressHardFail {
			return nil, err
		}
		log.Error(err, "Health server not started")
	}
	s.metrics, err = serveHTTP("metrics", cfg.MetricsBindAddress, metricsHandler(reg, mode, cfg), log)
	if err != nil {
		if cfg.BindAddressHardFail {
			s.healthz.shutdown(ctx)
			return nil, err
		}
		log.Error(err, "Metrics server not started")
	}
	return &s, nil
}

func (s *servers) shutdown(ctx context.Context) {
	s.healthz.shutdown(ctx)
	s.metrics.shutdown(ctx)
}

// syncPeriodOf is the full-sync period of the mode that will run.
func syncPeriodOf(cfg *KubeProxyConfiguration, mode string) time.Duration {
	if mode == modeIPVS {
		return cfg.IPVS.SyncPeriod.Duration
	}
	return cfg.IPTables.SyncPeriod.Duration
}

// adjustOOMScore writes oomScoreAdj to /proc/self/oom_score_adj (best
// effort, as kube-proxy: a failure is logged).
func adjustOOMScore(v *int32, log logr.Logger) {
	if v == nil || runtime.GOOS != "linux" {
		return
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(int(*v))), 0o644); err != nil {
		log.V(1).Info("Could not set oom_score_adj", "value", *v, "err", err.Error())
	}
}
