package main

import (
	"errors"
	"io/fs"
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

	// kube-proxy's defaults on 4 CPUs: max(32768*4, 131072) = 131072.
	f := &fakeSysctls{values: map[string]int{maxName: 65536}}
	cfg := defaultConfig().Conntrack
	if err := applyConntrack(cfg, f, 4, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		maxName: 131072,
		"net/netfilter/nf_conntrack_tcp_timeout_established": 86400,
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  3600,
	}
	for k, v := range want {
		if f.values[k] != v {
			t.Errorf("%s = %d, want %d", k, f.values[k], v)
		}
	}
	if len(f.values) != len(want) {
		t.Errorf("unexpected sysctls written: %v", f.values)
	}

	// Never lowered; 0 per core leaves it alone; the rest still applies.
	f = &fakeSysctls{values: map[string]int{maxName: 1 << 20}}
	_ = applyConntrack(ConntrackConfig{MaxPerCore: i32(1000), Min: i32(10)}, f, 8, logr.Discard())
	if f.values[maxName] != 1<<20 {
		t.Errorf("nf_conntrack_max lowered to %d", f.values[maxName])
	}
	f = &fakeSysctls{values: map[string]int{maxName: 5}}
	_ = applyConntrack(ConntrackConfig{MaxPerCore: i32(0), Min: i32(100), TCPBeLiberal: true, UDPTimeout: metav1.Duration{Duration: 30 * time.Second}}, f, 8, logr.Discard())
	if f.values[maxName] != 5 || f.values["net/netfilter/nf_conntrack_tcp_be_liberal"] != 1 || f.values["net/netfilter/nf_conntrack_udp_timeout"] != 30 {
		t.Errorf("sysctls = %v", f.values)
	}

	// A read-only sysctl is an error naming it, and does not stop the others.
	f = &fakeSysctls{values: map[string]int{maxName: 5}, readOnly: map[string]bool{maxName: true}}
	err := applyConntrack(ConntrackConfig{MaxPerCore: i32(10), TCPCloseWaitTimeout: dur(time.Minute)}, f, 1, logr.Discard())
	if !errors.Is(err, fs.ErrPermission) || f.values["net/netfilter/nf_conntrack_tcp_timeout_close_wait"] != 60 {
		t.Errorf("err = %v, values = %v", err, f.values)
	}
}
