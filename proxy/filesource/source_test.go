package filesource

import (
	"context"
	"errors"
	"fmt"
	"github.com/go-logr/logr/funcr"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

const livenessTimeout = 30 * time.Second

// recorder records every handler call.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

// take returns and clears the events.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

func (r *recorder) OnServiceAdd(s *v1.Service) { r.add("service add %s/%s", s.Namespace, s.Name) }
func (r *recorder) OnServiceUpdate(o, s *v1.Service) {
	r.add("service update %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnServiceDelete(s *v1.Service) { r.add("service delete %s/%s", s.Namespace, s.Name) }
func (r *recorder) OnServiceSynced()              { r.add("services synced") }
func (r *recorder) OnEndpointSliceAdd(s *discovery.EndpointSlice) {
	r.add("slice add %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnEndpointSliceUpdate(o, s *discovery.EndpointSlice) {
	r.add("slice update %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnEndpointSliceDelete(s *discovery.EndpointSlice) {
	r.add("slice delete %s/%s", s.Namespace, s.Name)
}
func (r *recorder) OnEndpointSlicesSynced()    { r.add("slices synced") }
func (r *recorder) OnNodeAdd(n *v1.Node)       { r.add("node add %s", n.Name) }
func (r *recorder) OnNodeUpdate(o, n *v1.Node) { r.add("node update %s", n.Name) }
func (r *recorder) OnNodeDelete(n *v1.Node)    { r.add("node delete %s", n.Name) }
func (r *recorder) OnNodeSynced()              { r.add("node synced") }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func svcDoc(name, ip string, labels string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s, labels: {%s}}\nspec: {clusterIP: %s, ports: [{port: 80}]}\n", name, labels, ip)
}

func sliceDoc(name, svc, ip string) string {
	return fmt.Sprintf("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: %s, labels: {kubernetes.io/service-name: %s}}\naddressType: IPv4\nendpoints: [{addresses: [%s]}]\nports: [{port: 8080}]\n", name, svc, ip)
}

func nodeDoc(name, zone string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Node\nmetadata: {name: %s, labels: {topology.kubernetes.io/zone: %s}}\n", name, zone)
}

func epDoc(name string, ips ...string) string {
	var subsets []string
	for _, ip := range ips {
		subsets = append(subsets, fmt.Sprintf("{addresses: [{ip: %s}], ports: [{port: 80}]}", ip))
	}
	return fmt.Sprintf("apiVersion: v1\nkind: Endpoints\nmetadata: {name: %s}\nsubsets: [%s]\n", name, strings.Join(subsets, ", "))
}

func docs(d ...string) string { return strings.Join(d, "---\n") }

func TestLoadDiffs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "objects.yaml")
	rec := &recorder{}
	src := New(path, rec, Options{NodeName: "node-a", Logger: testr.New(t)})

	steps := []struct {
		name    string
		content string
		want    []string
	}{
		{
			name: "first load adds everything, then reports synced",
			content: docs(svcDoc("b", "10.0.0.2", ""), svcDoc("a", "10.0.0.1", ""), sliceDoc("a-1", "a", "10.1.0.1"),
				nodeDoc("node-a", "z1"), nodeDoc("node-b", "z2"), epDoc("legacy", "10.2.0.1", "10.2.0.2")),
			want: []string{"node add node-a", "service add default/a", "service add default/b", "slice add default/a-1",
				"slice add default/legacy-legacy-0-ipv4", "slice add default/legacy-legacy-1-ipv4",
				"services synced", "slices synced", "node synced"},
		},
		{
			name: "same objects reordered and reformatted: no events",
			content: "# comment\n" + docs(nodeDoc("node-b", "z2"), epDoc("legacy", "10.2.0.1", "10.2.0.2"), svcDoc("a", "10.0.0.1", ""),
				sliceDoc("a-1", "a", "10.1.0.1"), svcDoc("b", "10.0.0.2", ""), nodeDoc("node-a", "z1")),
			want: nil,
		},
		{
			name: "one change, one removal, one subset less",
			content: docs(svcDoc("a", "10.0.0.9", ""), sliceDoc("a-1", "a", "10.1.0.1"),
				nodeDoc("node-a", "z1"), epDoc("legacy", "10.2.0.3")),
			want: []string{"service update default/a", "slice update default/legacy-legacy-0-ipv4",
				"slice delete default/legacy-legacy-1-ipv4", "service delete default/b"},
		},
		{
			name:    "node zone changes, others' nodes ignored",
			content: docs(svcDoc("a", "10.0.0.9", ""), sliceDoc("a-1", "a", "10.1.0.1"), nodeDoc("node-a", "z2"), nodeDoc("node-c", "z3"), epDoc("legacy", "10.2.0.3")),
			want:    []string{"node update node-a"},
		},
		{
			name:    "a document that does not parse refuses the whole file",
			content: docs(svcDoc("a", "10.0.0.9", ""), "kind: Service\nmetadata: {name: broken\n", sliceDoc("a-1", "a", "10.1.0.2"), nodeDoc("node-a", "z2"), epDoc("legacy", "10.2.0.3")),
			want:    nil,
		},
		{
			name:    "the fixed file applies",
			content: docs(svcDoc("a", "10.0.0.9", ""), sliceDoc("a-1", "a", "10.1.0.2"), nodeDoc("node-a", "z2"), epDoc("legacy", "10.2.0.3")),
			want:    []string{"slice update default/a-1"},
		},
		{
			name: "a document that becomes bad keeps its last good object",
			content: docs(svcDoc("a", "10.0.0.9", "")+"typo: 1\n", sliceDoc("a-1", "a", "10.1.0.2"), nodeDoc("node-a", "z2"),
				"apiVersion: v1\nkind: Endpoints\nmetadata: {name: legacy}\nsubsets: 7\n"),
			want: nil,
		},
		{
			name:    "everything removed (an empty List): deletes in reverse kind order",
			content: "apiVersion: v1\nkind: List\nitems: []\n",
			want:    []string{"slice delete default/legacy-legacy-0-ipv4", "slice delete default/a-1", "service delete default/a", "node delete node-a"},
		},
	}
	for i, st := range steps {
		writeFile(t, path, st.content)
		err := src.Load(ctx)
		if i == 4 {
			if !errors.Is(err, ErrNotWhole) || !strings.Contains(err.Error(), "document 2") {
				t.Fatalf("%s: Load = %v, want ErrNotWhole naming document 2", st.name, err)
			}
			if err2 := src.Load(ctx); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("%s: second Load = %v, want %v", st.name, err2, err)
			}
		} else if i == 6 {
			var perrs ParseErrors
			var pe *ParseError
			if !errors.As(err, &perrs) || !errors.As(err, &pe) {
				t.Fatalf("%s: Load = %v, want ParseErrors", st.name, err)
			}
			if len(perrs) != 2 || !errors.Is(err, ErrInvalidObject) {
				t.Fatalf("%s: Load = %v, want two invalid objects", st.name, err)
			}
			// Unchanged content: no events, same errors again.
			if err2 := src.Load(ctx); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("%s: second Load = %v, want %v", st.name, err2, err)
			}
		} else if err != nil {
			t.Fatalf("%s: Load: %v", st.name, err)
		}
		if got := rec.take(); !slices.Equal(got, st.want) {
			t.Errorf("%s: events\n%q\nwant\n%q", st.name, got, st.want)
		}
	}
}

func TestLoadUnreadableKeepsState(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "objects.yaml")
	rec := &recorder{}
	src := New(path, rec, Options{})
	if err := src.Load(ctx); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a missing file = %v, want ErrNotExist", err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("events without a file: %q", got)
	}
	writeFile(t, path, svcDoc("a", "10.0.0.1", ""))
	if err := src.Load(ctx); err != nil {
		t.Fatal(err)
	}
	rec.take()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := src.Load(ctx); err == nil {
		t.Fatal("Load of a removed file succeeded")
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("a vanished file changed the state: %q", got)
	}
	if objs := src.Objects(); len(objs) != 1 || objs[0].Key.Name != "a" {
		t.Errorf("state after a failed read: %v", objs)
	}
}

func TestSelectors(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "objects.yaml")
	writeFile(t, path, docs(
		svcDoc("plain", "10.0.0.1", ""),
		svcDoc("mine", "10.0.0.2", "service.kubernetes.io/service-proxy-name: net2"),
		svcDoc("theirs", "10.0.0.3", "service.kubernetes.io/service-proxy-name: net3"),
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: h, labels: {kubernetes.io/service-name: h, service.kubernetes.io/headless: \"\"}}\naddressType: IPv4\n",
	))
	for _, tc := range []struct {
		proxyName string
		want      []string
	}{
		{"", []string{"service add default/plain"}},
		{"net2", []string{"service add default/mine"}},
	} {
		rec := &recorder{}
		src := New(path, rec, Options{ServiceProxyName: tc.proxyName})
		if err := src.Load(ctx); err != nil {
			t.Fatal(err)
		}
		got := rec.take()
		if !slices.Equal(got[:len(got)-3], tc.want) {
			t.Errorf("proxy name %q: events %q, want %q", tc.proxyName, got, tc.want)
		}
	}
	bad := New(path, &recorder{}, Options{ServiceProxyName: "bad name!"})
	if err := bad.Load(ctx); err == nil || !strings.Contains(err.Error(), "bad name!") {
		t.Errorf("Load with an invalid service proxy name = %v", err)
	}
	if err := bad.Run(ctx); err == nil {
		t.Error("Run with an invalid service proxy name succeeded")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("New(nil handlers) did not panic")
			}
		}()
		New(path, nil, Options{})
	}()
}

func TestRunPolls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "objects.yaml")
	writeFile(t, path, svcDoc("a", "10.0.0.1", ""))
	rec := &recorder{}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	src := New(path, rec, Options{Interval: 5 * time.Second, Clock: clk, Logger: testr.New(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()

	var seen []string
	waitFor := func(e string) {
		t.Helper()
		deadline := time.Now().Add(livenessTimeout)
		for !slices.Contains(seen, e) {
			if time.Now().After(deadline) {
				t.Fatalf("never saw %q; saw %q", e, seen)
			}
			seen = append(seen, rec.take()...)
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitFor("node synced")
	// Wait until Run's ticker exists before moving the clock.
	for deadline := time.Now().Add(livenessTimeout); !clk.HasWaiters(); {
		if time.Now().After(deadline) {
			t.Fatal("Run never started its ticker")
		}
		time.Sleep(time.Millisecond)
	}
	writeFile(t, path, svcDoc("a", "10.0.0.2", ""))
	clk.Step(5 * time.Second)
	waitFor("service update default/a")

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(livenessTimeout):
		t.Fatal("Run did not return")
	}
	if n := strings.Count(strings.Join(seen, "\n"), "synced"); n != 3 {
		t.Errorf("Synced handlers called %d times, want 3", n)
	}
}

// At runtime, a file that does not parse as a whole (empty, binary, cut
// off mid-write, too large) changes nothing: the provider keeps the last
// good state and Load says why; a complete file applies again.
func TestRuntimeCorruptionKeepsState(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "objects.yaml")
	good := docs(svcDoc("a", "10.0.0.1", ""), sliceDoc("a-1", "a", "10.1.0.1"), svcDoc("b", "10.0.0.2", ""))
	writeFile(t, path, good)
	rec := &recorder{}
	src := New(path, rec, Options{MaxBytes: int64(len(good)) + 100})
	if err := src.Load(ctx); err != nil {
		t.Fatal(err)
	}
	rec.take()

	cut := good[:strings.Index(good, "ports: [{port: 8080}]")+len("ports: [{port: 80")]
	for _, tc := range []struct {
		name, content string
		want          error
	}{
		{"empty", "", ErrNotWhole},
		{"only whitespace and comments", "\n# saved by an editor\n\n", ErrNotWhole},
		{"binary", "\x00\x01\x02\xffELF\x00garbage", ErrNotWhole},
		{"cut off mid-write", cut, ErrNotWhole},
		{"cut off before a document's kind", good[:strings.LastIndex(good, "kind: Service")] + "kin", ErrNotWhole},
		{"too large", good + strings.Repeat("# padding\n", 20), ErrTooLarge},
	} {
		writeFile(t, path, tc.content)
		err := src.Load(ctx)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Load = %v, want %v", tc.name, err, tc.want)
		}
		if got := rec.take(); len(got) != 0 {
			t.Errorf("%s: changed the state: %q", tc.name, got)
		}
	}
	if st := src.Stats(); st.RejectedReads != 6 {
		t.Errorf("Stats = %+v, want 6 rejected reads", st)
	}

	// A per-object error skips only that object (counted); the rest applies.
	writeFile(t, path, docs(svcDoc("a", "10.0.0.9", ""), sliceDoc("a-1", "a", "10.1.0.1"),
		"apiVersion: v1\nkind: Service\nmetadata: {name: b}\nspec: {clusterIP: 10.0.0.2, ports: [{port: 80}], typo: 1}\n"))
	err := src.Load(ctx)
	if !errors.Is(err, ErrInvalidObject) || errors.Is(err, ErrNotWhole) {
		t.Errorf("one bad object: Load = %v, want ErrInvalidObject only", err)
	}
	if got := rec.take(); !slices.Equal(got, []string{"service update default/a"}) {
		t.Errorf("one bad object: events %q, want only a's update (b keeps its last good version)", got)
	}
	if st := src.Stats(); st.SkippedObjects != 1 {
		t.Errorf("Stats = %+v, want 1 skipped object", st)
	}
}

// Run logs a refused file at default verbosity, once per content.
func TestRunLogsRefusedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "objects.yaml")
	writeFile(t, path, svcDoc("a", "10.0.0.1", ""))
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{Verbosity: 0})
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := &recorder{}
	src := New(path, rec, Options{Interval: time.Second, Clock: clk, Logger: logger})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = src.Run(ctx) }()
	for deadline := time.Now().Add(livenessTimeout); !clk.HasWaiters(); {
		if time.Now().After(deadline) {
			t.Fatal("Run never started its ticker")
		}
		time.Sleep(time.Millisecond)
	}
	writeFile(t, path, "")
	for i := 0; i < 3; i++ {
		clk.Step(time.Second)
		for deadline := time.Now().Add(livenessTimeout); src.Stats().RejectedReads == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the empty file was never read")
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, l := range lines {
		if strings.Contains(l, "refused as a whole") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("want the refused file logged once at verbosity 0, got %d:\n%s", n, strings.Join(lines, "\n"))
	}
}
