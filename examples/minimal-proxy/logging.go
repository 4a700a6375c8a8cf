package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/resource"
)

// LoggingConfig is component-base's LoggingConfiguration, as kube-proxy's
// logging section and its logging flags (--logging-format, --v,
// --vmodule, --log-flush-frequency, --log-{text,json}-split-stream,
// --log-{text,json}-info-buffer-size) set it.
type LoggingConfig struct {
	// Format is "text" (key/value pairs) or "json" (one object a line).
	Format string `json:"format,omitempty"`
	// FlushFrequency is accepted for compatibility: lines are written
	// unbuffered, so there is nothing to flush.
	FlushFrequency flushFrequency `json:"flushFrequency"`
	Verbosity      int            `json:"verbosity"`
	// VModule is accepted for compatibility; verbosity here is per
	// process, not per source file.
	VModule []VModuleItem `json:"vmodule,omitempty"`
	Options FormatOptions `json:"options,omitempty"`
}

// VModuleItem is one --vmodule entry.
type VModuleItem struct {
	FilePattern string `json:"filePattern"`
	Verbosity   int    `json:"verbosity"`
}

// FormatOptions are the per-format options.
type FormatOptions struct {
	Text OutputRoutingOptions `json:"text,omitempty"`
	JSON OutputRoutingOptions `json:"json,omitempty"`
}

// OutputRoutingOptions: with SplitStream, info lines go to stdout and
// error lines to stderr (else both to stderr). InfoBufferSize is accepted
// for compatibility; lines are not buffered.
type OutputRoutingOptions struct {
	SplitStream    bool              `json:"splitStream,omitempty"`
	InfoBufferSize resource.Quantity `json:"infoBufferSize,omitempty"`
}

// flushFrequency is a duration written as "5s", read as "5s" or as integer
// nanoseconds (component-base's TimeOrMetaDuration).
type flushFrequency struct{ time.Duration }

func (f flushFrequency) MarshalJSON() ([]byte, error) { return json.Marshal(f.Duration.String()) }

func (f *flushFrequency) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(b, []byte(`"`)) {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("flushFrequency: %w", err)
		}
		f.Duration = d
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("flushFrequency: want a duration (\"5s\") or nanoseconds, got %s", b)
	}
	f.Duration = time.Duration(n)
	return nil
}

// vmoduleFlag is --vmodule: "pattern=N,pattern=N".
type vmoduleFlag struct{ items *[]VModuleItem }

func (f vmoduleFlag) String() string {
	if f.items == nil {
		return ""
	}
	var parts []string
	for _, it := range *f.items {
		parts = append(parts, fmt.Sprintf("%s=%d", it.FilePattern, it.Verbosity))
	}
	return strings.Join(parts, ",")
}

func (f vmoduleFlag) Set(s string) error {
	var items []VModuleItem
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		pattern, level, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(level)
		if !ok || pattern == "" || err != nil || n < 0 {
			return fmt.Errorf("%q: want pattern=N", part)
		}
		items = append(items, VModuleItem{FilePattern: pattern, Verbosity: n})
	}
	*f.items = items
	return nil
}

func (vmoduleFlag) Type() string { return "pattern=N,..." }

// quantityFlag is a resource quantity flag ("0", "64Ki", "1Mi").
type quantityFlag struct{ q *resource.Quantity }

func (f quantityFlag) String() string { return f.q.String() }

func (f quantityFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return err
	}
	*f.q = q
	return nil
}

func (quantityFlag) Type() string { return "quantity" }

// newLogger returns the binary's logger as cfg asks: text or json lines, at
// cfg.Verbosity, info and errors to stderr or (split stream) info to stdout.
// Every line carries the logger's name as the "logger" key.
func newLogger(stdout, stderr io.Writer, cfg LoggingConfig) logr.Logger {
	out := &logOutput{info: stderr, err: stderr}
	opts := funcr.Options{Verbosity: cfg.Verbosity}
	s := &logSink{out: out}
	if cfg.Format == "json" {
		opts.LogTimestamp = true
		s.json = true
		s.f = funcr.NewFormatterJSON(opts)
		if cfg.Options.JSON.SplitStream {
			out.info = stdout
		}
	} else {
		s.f = funcr.NewFormatter(opts)
		if cfg.Options.Text.SplitStream {
			out.info = stdout
		}
	}
	return logr.New(s)
}

// logOutput serializes the lines of every logger derived from one root.
type logOutput struct {
	mu        sync.Mutex
	info, err io.Writer
}

// logSink renders through funcr's formatter and writes one line per call.
type logSink struct {
	f    funcr.Formatter
	json bool
	out  *logOutput
}

func (s *logSink) Init(info logr.RuntimeInfo) { s.f.Init(info) }
func (s *logSink) Enabled(level int) bool     { return s.f.Enabled(level) }

func (s *logSink) Info(level int, msg string, kv ...any) {
	name, args := s.f.FormatInfo(level, msg, kv)
	s.write(s.out.info, name, args)
}

func (s *logSink) Error(err error, msg string, kv ...any) {
	name, args := s.f.FormatError(err, msg, kv)
	s.write(s.out.err, name, args)
}

// write prints one line: in text, the time and the logger's name (funcr
// returns it apart, as a prefix) as keys like every other value.
func (s *logSink) write(w io.Writer, name, args string) {
	var line string
	if s.json {
		// funcr's JSON object already carries "logger" (the name) and "ts".
		line = args
	} else {
		line = `"ts"="` + time.Now().Format("2006-01-02 15:04:05.000000") + `"`
		if name != "" {
			line += ` "logger"=` + strconv.Quote(name)
		}
		line += " " + args
	}
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	fmt.Fprintln(w, line)
}

func (s *logSink) WithName(name string) logr.LogSink {
	c := *s
	c.f.AddName(name)
	return &c
}

func (s *logSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.f.AddValues(kv)
	return &c
}

// stdLog carries the standard library logger's lines (the log package),
// which some dependencies write to: vishvananda/netlink writes one line
// for every member of a set ipset(8) made that carries attributes it does
// not know (thousands on a node programmed by upstream kube-proxy, for
// trace and diff in the ipvs mode). main sends them here; they go to the
// binary's logger at verbosity 4 once run or diff has made it, and
// nowhere before.
var stdLog = &stdLogBridge{}

type stdLogBridge struct {
	mu  sync.Mutex
	log logr.Logger // zero: discard
}

// set routes the lines to log's V(4).
func (b *stdLogBridge) set(log logr.Logger) {
	b.mu.Lock()
	b.log = log.WithName("stdlog").V(4)
	b.mu.Unlock()
}

func (b *stdLogBridge) Write(p []byte) (int, error) {
	b.mu.Lock()
	log := b.log
	b.mu.Unlock()
	if log.GetSink() != nil && log.Enabled() {
		log.Info(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
