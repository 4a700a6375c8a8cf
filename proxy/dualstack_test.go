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
	d := NewDualStack(v4, v6)
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
	err := NewDualStack(v4, v6).Sync(context.Background())
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
	go func() { done <- NewDualStack(v4, v6).Run(context.Background()) }()
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
	go func() { done <- NewDualStack(v4, v6).Run(ctx) }()
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

func TestDualStackWithOneFamily(t *testing.T) {
	v4 := &recordingProvider{}
	if NewDualStack(v4, nil) != Provider(v4) || NewDualStack(nil, v4) != Provider(v4) {
		t.Fatal("a single provider should be returned as is")
	}
	if NewDualStack(nil, nil) != nil {
		t.Fatal("two nil providers should give nil")
	}
}
