package proxy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// recordingProvider records every call as one line.
type recordingProvider struct {
	mu      sync.Mutex
	calls   []string
	syncErr error
	runErr  error
	// runEarly makes Run return at once (with runErr) instead of waiting.
	runEarly bool
}

func (r *recordingProvider) rec(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *recordingProvider) OnServiceAdd(s *v1.Service)       { r.rec("svc-add " + s.Name) }
func (r *recordingProvider) OnServiceUpdate(_, s *v1.Service) { r.rec("svc-update " + s.Name) }
func (r *recordingProvider) OnServiceDelete(s *v1.Service)    { r.rec("svc-delete " + s.Name) }
func (r *recordingProvider) OnServiceSynced()                 { r.rec("svc-synced") }
func (r *recordingProvider) OnEndpointSliceAdd(s *discovery.EndpointSlice) {
	r.rec("eps-add " + s.Name)
}
func (r *recordingProvider) OnEndpointSliceUpdate(_, s *discovery.EndpointSlice) {
	r.rec("eps-update " + s.Name)
}
func (r *recordingProvider) OnEndpointSliceDelete(s *discovery.EndpointSlice) {
	r.rec("eps-delete " + s.Name)
}
func (r *recordingProvider) OnEndpointSlicesSynced()    { r.rec("eps-synced") }
func (r *recordingProvider) OnNodeAdd(n *v1.Node)       { r.rec("node-add " + n.Name) }
func (r *recordingProvider) OnNodeUpdate(_, n *v1.Node) { r.rec("node-update " + n.Name) }
func (r *recordingProvider) OnNodeDelete(n *v1.Node)    { r.rec("node-delete " + n.Name) }
func (r *recordingProvider) OnNodeSynced()              { r.rec("node-synced") }
func (r *recordingProvider) Sync(context.Context) error { r.rec("sync"); return r.syncErr }
func (r *recordingProvider) Run(ctx context.Context) error {
	r.rec("run")
	if !r.runEarly {
		<-ctx.Done()
	}
	return r.runErr
}

func TestDualStackFansOutEveryCall(t *testing.T) {
	v4, v6 := &recordingProvider{}, &recordingProvider{}
	d := mustDualStack(t, v4, v6)
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
	eps := &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "e"}}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	d.OnServiceAdd(svc)
	d.OnServiceUpdate(svc, svc)
	d.OnServiceDelete(svc)
	d.OnServiceSynced()
	d.OnEndpointSliceAdd(eps)
	d.OnEndpointSliceUpdate(eps, eps)
	d.OnEndpointSliceDelete(eps)
	d.OnEndpointSlicesSynced()
	d.OnNodeAdd(node)
	d.OnNodeUpdate(node, node)
	d.OnNodeDelete(node)
	d.OnNodeSynced()
	if err := d.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "svc-add s,svc-update s,svc-delete s,svc-synced,eps-add e,eps-update e,eps-delete e,eps-synced," +
		"node-add n,node-update n,node-delete n,node-synced,sync"
	for i, p := range []*recordingProvider{v4, v6} {
		if got := strings.Join(p.calls, ","); got != want {
			t.Errorf("provider %d calls:\n got %s\nwant %s", i, got, want)
		}
	}
}

func TestDualStackSyncJoinsErrorsAndSyncsBoth(t *testing.T) {
	errV6 := errors.New("v6 broke")
	v4, v6 := &recordingProvider{syncErr: ErrNotSynced}, &recordingProvider{syncErr: errV6}
	err := mustDualStack(t, v4, v6).Sync(context.Background())
	if !errors.Is(err, ErrNotSynced) || !errors.Is(err, errV6) {
		t.Fatalf("Sync error %v does not wrap both errors", err)
	}
	if len(v6.calls) != 1 {
		t.Fatal("IPv6 provider not synced after the IPv4 one failed")
	}
}

func TestDualStackRunStopsBothWhenOneFails(t *testing.T) {
	boom := errors.New("boom")
	v4, v6 := &recordingProvider{runEarly: true, runErr: boom}, &recordingProvider{}
	done := make(chan error, 1)
	go func() { done <- mustDualStack(t, v4, v6).Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Fatalf("Run = %v, want boom", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after one provider failed")
	}
}

func TestDualStackRunUntilContextEnds(t *testing.T) {
	v4, v6 := &recordingProvider{}, &recordingProvider{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mustDualStack(t, v4, v6).Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	if len(v4.calls) != 1 || len(v6.calls) != 1 {
		t.Fatalf("Run calls: v4 %v, v6 %v", v4.calls, v6.calls)
	}
}

func mustDualStack(t *testing.T, v4, v6 Provider) Provider {
	t.Helper()
	d, err := NewDualStack(v4, v6)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// familyProvider is a recordingProvider that says its family, as engines do.
type familyProvider struct {
	recordingProvider
	family v1.IPFamily
}

func (f *familyProvider) IPFamily() v1.IPFamily { return f.family }

func TestDualStackRefusesBadPairs(t *testing.T) {
	var typedNil *recordingProvider
	v4 := &familyProvider{family: v1.IPv4Protocol}
	v6 := &familyProvider{family: v1.IPv6Protocol}
	other6 := &familyProvider{family: v1.IPv6Protocol}
	for _, c := range []struct {
		name       string
		ipv4, ipv6 Provider
		want       string
	}{
		{"nil ipv6", v4, nil, "ipv6 provider is nil"},
		{"nil ipv4", nil, v6, "ipv4 provider is nil"},
		{"typed nil", typedNil, v6, "ipv4 provider is nil"},
		{"swapped", v6, v4, "ipv4 provider is an IPv6 proxier"},
		{"two IPv6", other6, v6, "ipv4 provider is an IPv6 proxier"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := NewDualStack(c.ipv4, c.ipv6)
			if err == nil || !strings.Contains(err.Error(), c.want) || d != nil {
				t.Fatalf("NewDualStack = %v, %v; want an error containing %q", d, err, c.want)
			}
		})
	}
	if _, err := NewDualStack(v4, v6); err != nil {
		t.Fatalf("a right pair was refused: %v", err)
	}
	// Providers that do not say their family are taken as given.
	if _, err := NewDualStack(&recordingProvider{}, &recordingProvider{}); err != nil {
		t.Fatalf("providers without IPFamily were refused: %v", err)
	}
}
