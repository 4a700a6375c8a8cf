package healthcheck

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Listener opens the listening sockets of the health servers. The zero
// value of the configs uses StdListener; tests inject one that binds
// loopback ephemeral ports or fails on purpose.
type Listener interface {
	// Listen is net.ListenConfig.Listen with network "tcp".
	Listen(ctx context.Context, addr string) (net.Listener, error)
}

// StdListener listens with the standard library.
type StdListener struct{}

// Listen implements Listener.
func (StdListener) Listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", addr)
}

// readHeaderTimeout bounds how long a client may take to send its request
// headers, so that idle probers cannot pin goroutines.
const readHeaderTimeout = 10 * time.Second

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout}
}

// setJSONHeaders sets the headers kube-proxy sends with every health answer.
func setJSONHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}
