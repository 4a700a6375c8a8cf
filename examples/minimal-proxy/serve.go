package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsHandler serves kube-proxy's metrics address: /metrics (the
// registry), /proxyMode (the mode in use, as text), /healthz (the server
// is up), /configz (the resolved configuration) and, with
// enableProfiling, /debug/pprof/.
func metricsHandler(reg *prometheus.Registry, mode string, cfg *KubeProxyConfiguration) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		fmt.Fprint(w, mode)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("/configz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"kubeproxy.config.k8s.io": cfg})
	})
	if cfg.EnableProfiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// httpServer is one of the binary's HTTP servers, started by serveHTTP.
type httpServer struct {
	name string
	srv  *http.Server
	done chan struct{}
}

// serveHTTP listens on addr ("" disables the server: nil, nil) and serves h
// in the background. A listen failure is returned; the caller decides
// whether it is fatal (bindAddressHardFail).
func serveHTTP(name, addr string, h http.Handler, log logr.Logger) (*httpServer, error) {
	if addr == "" {
		log.Info("server disabled", "server", name)
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s server: %w", name, err)
	}
	s := &httpServer{
		name: name,
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	log.Info("serving", "server", name, "address", ln.Addr().String())
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "server stopped", "server", name)
		}
	}()
	return s, nil
}

// shutdown stops the server, giving open requests until ctx ends.
func (s *httpServer) shutdown(ctx context.Context) {
	if s == nil {
		return
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}
