package tcprelay

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Pair copies both directions of one proxied connection.
type Pair struct {
	Client, Backend net.Conn
	// Pipes holds the splice pipes between bursts (shared by a proxy's
	// connections). Required.
	Pipes *PipePool
	// HalfCloseTimeout (<=0: none): after one direction ended cleanly,
	// the other may be silent this long before both sides are reset.
	HalfCloseTimeout time.Duration

	once       sync.Once
	halfClosed atomic.Bool // one direction ended cleanly
	timedOut   atomic.Bool // the other then stayed silent
}

// CloseBoth closes both connections (once; safe from any goroutine).
func (c *Pair) CloseBoth() {
	c.once.Do(func() {
		c.Client.Close()
		c.Backend.Close()
	})
}

// Run copies both ways until both directions ended, then closes both
// connections. A clean EOF in one direction is passed on as a half-close
// (CloseWrite) and the other direction keeps flowing as long as it carries
// data at least every HalfCloseTimeout; an error in either direction, or
// that timeout, resets both sides. It reports whether the timeout ended
// the connection.
func (c *Pair) Run() bool {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.copy(c.Client, c.Backend)
	}()
	// The client's request is likely waiting already: this goroutine
	// forwards it at once, before the new one runs.
	c.copy(c.Backend, c.Client)
	wg.Wait()
	c.CloseBoth()
	return c.timedOut.Load()
}

type closeWriter interface{ CloseWrite() error }

type lingerer interface{ SetLinger(sec int) error }

// abort closes both sides with a reset: a stream that broke must not look
// like one that ended (a clean FIN could pass a truncated response off as
// complete).
func (c *Pair) abort() {
	for _, conn := range []net.Conn{c.Client, c.Backend} {
		if l, ok := conn.(lingerer); ok {
			l.SetLinger(0)
		}
	}
	c.CloseBoth()
}

func (c *Pair) copy(dst, src net.Conn) {
	for {
		// Splices on Linux, holding a pipe only while data is in flight
		// (see CopyStream).
		n, err := CopyStream(c.Pipes, dst, src)
		if err == nil {
			break
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && c.halfClosed.Load() {
			if n > 0 {
				// Data flowed in this window: give it another. (The
				// first window may count bytes from before the other
				// side finished: a silent peer gets at most two.)
				src.SetReadDeadline(time.Now().Add(c.HalfCloseTimeout))
				continue
			}
			c.timedOut.Store(true)
		}
		c.abort()
		return
	}
	if cw, ok := dst.(closeWriter); ok {
		if cw.CloseWrite() == nil {
			// dst is the other direction's source: from now on it must
			// keep talking (see Run).
			if c.HalfCloseTimeout > 0 && !c.halfClosed.Swap(true) {
				dst.SetReadDeadline(time.Now().Add(c.HalfCloseTimeout))
			}
			return
		}
	}
	c.CloseBoth()
}
