package filesource

import (
	"errors"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// FuzzParse checks that ParseObjects never panics, that every object it
// returns is one of the four kinds with a name and a consistent key, that
// every error is a positioned *ParseError, and that parsing is
// deterministic. Seeds: testdata/fuzz/FuzzParse and testdata/objects.yaml.
//
// Run it with minimisation off: the k8s.io/api types make the coverage map
// so large that minimising each new input stalls the worker for minutes.
//
//	go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 60s -fuzzminimizetime 0 -parallel 1 ./proxy/filesource/
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("testdata/objects.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Node, metadata: {name: a}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, errs := ParseObjects(data)
		seen := map[Key]bool{}
		for _, o := range objs {
			if o.Key.Name == "" {
				t.Fatalf("object without a name: %+v", o)
			}
			if seen[o.Key] {
				t.Fatalf("duplicate key %s returned", o.Key)
			}
			seen[o.Key] = true
			if o.Pos.Document < 1 || o.Pos.Line < 1 || o.Pos.Item < -1 {
				t.Fatalf("bad position %+v", o.Pos)
			}
			var name, ns string
			switch obj := o.Object.(type) {
			case *v1.Service:
				name, ns = obj.Name, obj.Namespace
				if o.Key.Kind != KindService {
					t.Fatalf("kind %s for a Service", o.Key.Kind)
				}
			case *discovery.EndpointSlice:
				name, ns = obj.Name, obj.Namespace
				if o.Key.Kind != KindEndpointSlice || obj.Labels[discovery.LabelServiceName] == "" {
					t.Fatalf("bad slice %+v", o)
				}
			case *v1.Endpoints:
				name, ns = obj.Name, obj.Namespace
				if o.Key.Kind != KindEndpoints {
					t.Fatalf("kind %s for Endpoints", o.Key.Kind)
				}
			case *v1.Node:
				name, ns = obj.Name, obj.Namespace
				if o.Key.Kind != KindNode || ns != "" {
					t.Fatalf("bad node %+v", o)
				}
			default:
				t.Fatalf("unexpected object type %T", o.Object)
			}
			if name != o.Key.Name || ns != o.Key.Namespace {
				t.Fatalf("key %s does not match object %s/%s", o.Key, ns, name)
			}
			if o.Key.Kind != KindNode && ns == "" {
				t.Fatalf("namespaced object without namespace: %s", o.Key)
			}
		}
		for _, err := range errs {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			if pe.Pos.Document < 1 || pe.Pos.Line < 1 || pe.Err == nil {
				t.Fatalf("bad error %+v", pe)
			}
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrMissingKind) && !errors.Is(err, ErrUnsupportedKind) &&
				!errors.Is(err, ErrInvalidObject) && !errors.Is(err, ErrDuplicate) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
		}
		objs2, errs2 := ParseObjects(data)
		if len(objs2) != len(objs) || len(errs2) != len(errs) {
			t.Fatalf("not deterministic: %d/%d objects, %d/%d errors", len(objs), len(objs2), len(errs), len(errs2))
		}
	})
}
