package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/proxy"
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole binary: parse, set up, serve until ctx ends (SIGTERM or
// SIGINT), shut down. It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, runtime.GOOS, stderr)
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "minimal-proxy: %v\n", err)
		return exitUsage
	}
	log := newLogger(stderr, o.config.Logging.Verbosity)
	klog.SetLogger(log.WithName("client-go"))

	if o.cleanup {
		if err := cleanupAll(ctx, log); err != nil {
			log.Error(err, "Cleanup left something behind")
			return exitFailed
		}
		log.Info("Cleanup done")
		return exitOK
	}

	if err := serve(ctx, o, stdout, log); err != nil {
		log.Error(err, "Exiting")
		fmt.Fprintf(stderr, "minimal-proxy: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// newLogger logs text lines to w at verbosity v.
func newLogger(w io.Writer, v int) logr.Logger {
	var mu sync.Mutex
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if prefix != "" {
			fmt.Fprintln(w, prefix, args)
			return
		}
		fmt.Fprintln(w, args)
	}, funcr.Options{LogTimestamp: true, Verbosity: v})
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
		node, err := src.node(ctx)
		if err != nil {
			return err
		}
		return dryRun(ctx, o, mode, nodeName, node, nodeAddresses(node, cfg.BindAddress, log), src, stdout, log)
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
	adjustOOMScore(cfg.OOMScoreAdj, log)
	if runtime.GOOS == "linux" {
		_ = applyConntrack(cfg.Conntrack, procSysctls{}, numCPU(), log.WithName("conntrack")) // logged; not fatal
	}

	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errCh := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := eng.provider.Run(runCtx); err != nil && runCtx.Err() == nil {
			errCh <- fmt.Errorf("%s proxier: %w", eng.mode, err)
		}
	}()
	go func() {
		defer wg.Done()
		h := handlers{Provider: eng.provider, health: health}
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
	if eng.close != nil {
		eng.close()
	}
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
