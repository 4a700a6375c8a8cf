package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
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

// consistentHealth makes the JSON bodies of h (/healthz, /livez) agree
// with their status codes: proxy/healthcheck reports the proxy's own
// health in "healthy" even when /healthz answers 503 because the node is
// not eligible (deleted, or being removed by the autoscaler), which reads
// as a healthy 503. Here "healthy" is true exactly when the answer is 200.
func consistentHealth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &bufferedResponse{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		body := rec.body.Bytes()
		var fields map[string]json.RawMessage
		if json.Unmarshal(body, &fields) == nil {
			if _, ok := fields["healthy"]; ok {
				fields["healthy"] = json.RawMessage(strconv.FormatBool(rec.code == http.StatusOK))
				if fixed, err := marshalInOrder(body, fields); err == nil {
					body = fixed
				}
			}
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.code)
		_, _ = w.Write(body)
	})
}

// marshalInOrder re-encodes fields keeping the key order of orig (the
// body keeps reading like kube-proxy's).
func marshalInOrder(orig []byte, fields map[string]json.RawMessage) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(orig))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteByte('{')
	for i := 0; dec.More(); i++ {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(fields[key])
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// bufferedResponse records a handler's answer.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) WriteHeader(code int)        { b.code = code }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }
