package tcprelay_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/tcprelay"
)

// pipeTCP returns both ends of a loopback TCP connection.
func pipeTCP(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := tcprelay.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c
	}()
	a, err = net.DialTimeout("tcp4", ln.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b = <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	return a, b
}

// A Pair copies both directions; the client's half-close reaches the
// backend, whose answer after it still reaches the client; then both
// ends close.
func TestPairHalfClose(t *testing.T) {
	client, proxyClient := pipeTCP(t)
	proxyBackend, backend := pipeTCP(t)
	defer client.Close()
	defer backend.Close()
	pool := tcprelay.NewPipePool(nil)
	defer pool.CloseIdle()
	pair := &tcprelay.Pair{Client: proxyClient, Backend: proxyBackend, Pipes: pool, HalfCloseTimeout: 5 * time.Second}
	done := make(chan bool, 1)
	go func() { done <- pair.Run() }()

	client.Write([]byte("request"))
	client.(*net.TCPConn).CloseWrite()
	backend.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := io.ReadAll(backend)
	if err != nil || string(req) != "request" {
		t.Fatalf("backend read %q, %v", req, err)
	}
	backend.Write([]byte("response"))
	backend.Close()
	client.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := io.ReadAll(client)
	if err != nil || string(resp) != "response" {
		t.Fatalf("client read %q, %v", resp, err)
	}
	select {
	case timedOut := <-done:
		if timedOut {
			t.Error("Run reported a half-close timeout")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
}
