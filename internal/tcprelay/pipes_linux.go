//go:build linux

package tcprelay

import (
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// Splicing both directions of a proxied connection.
//
// io.Copy between two *net.TCPConn splices too, but it takes a pipe (two
// descriptors) for the whole copy, so an idle proxied connection held six
// descriptors: its two sockets and one pipe per direction. Here a pipe is
// taken only once the source has data, and given back as soon as that
// burst has been written out, so an idle connection holds just its two
// sockets and the pipes in use are bounded by the bursts in flight.

const (
	// spliceMax is the most one splice(2) moves, and the pipe size asked
	// for (fs.pipe-max-size's default).
	spliceMax = 1 << 20
	// IdlePipes bounds the empty pipes a PipePool keeps for the next
	// burst.
	IdlePipes = 16
)

type splicePipe struct{ r, w int }

// PipePool keeps up to IdlePipes empty pipes of one proxy for the next
// burst; CloseIdle closes them. Safe for concurrent use.
type PipePool struct {
	free  chan *splicePipe
	pipe2 func(p []int, flags int) error
}

// NewPipePool returns an empty pool that makes its pipes with pipe2 (nil:
// unix.Pipe2; tests make it fail).
func NewPipePool(pipe2 func(p []int, flags int) error) *PipePool {
	if pipe2 == nil {
		pipe2 = unix.Pipe2
	}
	return &PipePool{free: make(chan *splicePipe, IdlePipes), pipe2: pipe2}
}

func (pp *PipePool) get() (*splicePipe, error) {
	select {
	case p := <-pp.free:
		return p, nil
	default:
	}
	var fds [2]int
	if err := pp.pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	// A smaller pipe works too, with more calls.
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, spliceMax)
	return &splicePipe{r: fds[0], w: fds[1]}, nil
}

// put keeps an empty pipe for reuse (or closes it).
func (pp *PipePool) put(p *splicePipe) {
	select {
	case pp.free <- p:
	default:
		p.close()
	}
}

// CloseIdle closes the kept pipes; call once no copy runs.
func (pp *PipePool) CloseIdle() {
	for {
		select {
		case p := <-pp.free:
			p.close()
		default:
			return
		}
	}
}

func (p *splicePipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// CopyStream copies src to dst until src's EOF (nil error) or an error,
// like io.Copy; it reports the bytes copied. Between two *net.TCPConn it
// splices through a pipe of pool, taken only while a burst is in flight.
func CopyStream(pool *PipePool, dst, src net.Conn) (int64, error) {
	d, ok1 := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	if !ok1 || !ok2 {
		return io.Copy(dst, src)
	}
	rs, err := s.SyscallConn()
	if err != nil {
		return io.Copy(dst, src)
	}
	rd, err := d.SyscallConn()
	if err != nil {
		return io.Copy(dst, src)
	}
	var (
		total  int64
		pipe   *splicePipe
		n      int  // bytes in pipe
		eof    bool // src ended
		noPipe bool // src is readable but no pipe could be had
		buf    []byte
		opErr  error
	)
	// fill waits for src to have data (or EOF) and moves it into a pipe,
	// taken only then.
	fill := func(fd uintptr) bool {
		for {
			if pipe == nil {
				var err error
				if pipe, err = pool.get(); err != nil {
					noPipe = true // out of descriptors, say
					return true
				}
			}
			m, err := unix.Splice(int(fd), nil, pipe.w, nil, spliceMax, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				// Nothing to read: wait without holding the pipe.
				pool.put(pipe)
				pipe = nil
				return false
			case err != nil:
				opErr = err
			case m == 0:
				eof = true
			default:
				n = int(m)
			}
			return true
		}
	}
	// drain writes the pipe's n bytes to dst.
	drain := func(fd uintptr) bool {
		for n > 0 {
			m, err := unix.Splice(pipe.r, nil, int(fd), nil, n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return false // dst is full: wait until writable
			case err != nil:
				opErr = err
				return true
			}
			n -= int(m)
			total += m
		}
		return true
	}
	for {
		opErr = nil
		if err := rs.Read(fill); err != nil {
			// A deadline or a close, while waiting without a pipe.
			return total, err
		}
		if noPipe {
			// Copy this burst through user space and try a pipe again
			// for the next.
			noPipe = false
			if buf == nil {
				buf = make([]byte, 32<<10)
			}
			m, rerr := src.Read(buf)
			if m > 0 {
				w, werr := dst.Write(buf[:m])
				total += int64(w)
				if werr != nil {
					return total, werr
				}
			}
			if rerr == io.EOF {
				return total, nil
			}
			if rerr != nil {
				return total, rerr
			}
			continue
		}
		if opErr != nil {
			if pipe != nil {
				pool.put(pipe) // the failed splice moved nothing
			}
			return total, wrapOp("read", src, opErr)
		}
		if eof {
			if pipe != nil {
				pool.put(pipe)
			}
			return total, nil
		}
		werr := rd.Write(drain)
		if werr == nil && opErr != nil {
			werr = wrapOp("write", dst, opErr)
		}
		if werr != nil {
			// Bytes may be left in the pipe: do not reuse it.
			pipe.close()
			return total, werr
		}
		pool.put(pipe)
		pipe = nil
	}
}

func wrapOp(op string, c net.Conn, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
