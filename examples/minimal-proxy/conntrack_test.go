package main

import (
	"bytes"
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type fakeSysctls struct {
	values   map[string]int
	readOnly map[string]bool
}

func (f *fakeSysctls) Get(name string) (int, error) {
	v, ok := f.values[name]
	if !ok {
		return 0, fs.ErrNotExist
	}
	return v, nil
}

func (f *fakeSysctls) Set(name string, v int) error {
	if f.readOnly[name] {
		return fs.ErrPermission
	}
	f.values[name] = v
	return nil
}

func TestApplyConntrack(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	const maxName = "net/netfilter/nf_conntrack_max"

	// kube-proxy's defaults on 4 CPUs: max(32768*4, 131072) = 131072, and
	// the hash table raised to a quarter of it.
	f := &fakeSysctls{values: map[string]int{maxName: 65536, conntrackHashsize: 16384}}
	cfg := defaultConfig().Conntrack
	if err := applyConntrack(cfg, f, 4, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		maxName:           131072,
		conntrackHashsize: 32768,
		"net/netfilter/nf_conntrack_tcp_timeout_established": 86400,
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  3600,
	}
	if !reflect.DeepEqual(f.values, want) {
		t.Errorf("sysctls = %v, want %v", f.values, want)
	}

	// maxPerCore × CPUs above min wins, and is set even below the current
	// value (kube-proxy sets what differs); the hash table is never
	// shrunk.
	f = &fakeSysctls{values: map[string]int{maxName: 1 << 20, conntrackHashsize: 1 << 18}}
	_ = applyConntrack(ConntrackConfig{MaxPerCore: i32(1000), Min: i32(10)}, f, 8, logr.Discard())
	if f.values[maxName] != 8000 || f.values[conntrackHashsize] != 1<<18 {
		t.Errorf("max per core 1000 on 8 CPUs: %v", f.values)
	}
	// maxPerCore 0 leaves nf_conntrack_max alone (min ignored); the rest
	// still applies.
	f = &fakeSysctls{values: map[string]int{maxName: 5}}
	_ = applyConntrack(ConntrackConfig{MaxPerCore: i32(0), Min: i32(100), TCPBeLiberal: true, UDPTimeout: metav1.Duration{Duration: 30 * time.Second},
		UDPStreamTimeout: metav1.Duration{Duration: 2 * time.Minute}}, f, 8, logr.Discard())
	want = map[string]int{maxName: 5, "net/netfilter/nf_conntrack_tcp_be_liberal": 1, "net/netfilter/nf_conntrack_udp_timeout": 30,
		"net/netfilter/nf_conntrack_udp_timeout_stream": 120}
	if !reflect.DeepEqual(f.values, want) {
		t.Errorf("sysctls = %v, want %v", f.values, want)
	}

	// A read-only sysctl is a warning naming it and an error, and does not
	// stop the others; one already at its value is not written at all.
	var logs bytes.Buffer
	f = &fakeSysctls{values: map[string]int{maxName: 5, "net/netfilter/nf_conntrack_tcp_timeout_established": 60},
		readOnly: map[string]bool{maxName: true, "net/netfilter/nf_conntrack_tcp_timeout_established": true}}
	err := applyConntrack(ConntrackConfig{MaxPerCore: i32(10), TCPCloseWaitTimeout: dur(time.Minute), TCPEstablishedTimeout: dur(time.Minute)},
		f, 1, newLogger(&logs, &logs, LoggingConfig{}))
	if !errors.Is(err, fs.ErrPermission) || f.values["net/netfilter/nf_conntrack_tcp_timeout_close_wait"] != 60 {
		t.Errorf("err = %v, values = %v", err, f.values)
	}
	if _, written := f.values[conntrackHashsize]; written {
		t.Errorf("the host-wide hash table size was written although nf_conntrack_max could not be: %v", f.values)
	}
	if n := strings.Count(logs.String(), "Warning: could not set"); n != 1 || !strings.Contains(logs.String(), maxName) {
		t.Errorf("want one warning naming %s:\n%s", maxName, logs.String())
	}
}

// conntrackMax is max(maxPerCore × CPUs, min), 0 when maxPerCore is 0.
func TestConntrackMax(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		perCore, min *int32
		cpus, want   int
	}{
		{i32(32768), i32(131072), 2, 131072},
		{i32(32768), i32(131072), 8, 262144},
		{i32(0), i32(131072), 8, 0},
		{nil, i32(131072), 8, 0},
		{i32(10), nil, 3, 30},
	} {
		if got := conntrackMax(ConntrackConfig{MaxPerCore: tc.perCore, Min: tc.min}, tc.cpus); got != tc.want {
			t.Errorf("conntrackMax(%v, %v, %d CPUs) = %d, want %d", tc.perCore, tc.min, tc.cpus, got, tc.want)
		}
	}
}

// As kube-proxy v1.34 (cmd/kube-proxy/app/conntrack.go): no cap on
// nf_conntrack_max (65536 per core on 64 CPUs is 4 Mi entries), the CPUs
// counted from /sys's online list, and an unreadable hash table size an
// error that leaves it unwritten.
func TestConntrackAsV134(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	if got := conntrackMax(ConntrackConfig{MaxPerCore: i32(65536), Min: i32(131072)}, 64); got != 65536*64 {
		t.Errorf("conntrackMax on 64 CPUs = %d, want %d (uncapped)", got, 65536*64)
	}
	for s, want := range map[string]int{"0": 1, "0-1": 2, "0-3,8,10-11": 7, "": 0, "x": 0, "3-1": 0} {
		if got := countCPUList(s); got != want {
			t.Errorf("countCPUList(%q) = %d, want %d", s, got, want)
		}
	}
	if n := numCPU(); n < 1 {
		t.Errorf("numCPU() = %d", n)
	}
	const maxName = "net/netfilter/nf_conntrack_max"
	f := &fakeSysctls{values: map[string]int{maxName: 5}} // no hashsize: unreadable
	err := applyConntrack(ConntrackConfig{MaxPerCore: i32(1000)}, f, 4, logr.Discard())
	if err == nil || f.values[maxName] != 4000 {
		t.Errorf("err = %v, values %v; want nf_conntrack_max 4000 and an error for the hash table size", err, f.values)
	}
	if _, written := f.values[conntrackHashsize]; written {
		t.Errorf("an unreadable hash table size was written: %v", f.values)
	}
}
