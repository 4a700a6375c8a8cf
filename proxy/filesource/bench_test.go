package filesource

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// bigFile renders n services, each with one EndpointSlice of 10 endpoints
// (the scale in DESIGN.md), as YAML or as a JSON stream.
func bigFile(n int, asJSON bool) []byte {
	var b bytes.Buffer
	for i := range n {
		if asJSON {
			fmt.Fprintf(&b, `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc-%d","namespace":"ns"},"spec":{"clusterIP":"10.%d.%d.1","ports":[{"name":"http","port":80}]}}`+"\n", i, i/256%256, i%256)
			fmt.Fprintf(&b, `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"svc-%d-1","namespace":"ns","labels":{"kubernetes.io/service-name":"svc-%d"}},"addressType":"IPv4","ports":[{"name":"http","port":8080}],"endpoints":[`, i, i)
			for j := range 10 {
				if j > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"addresses":["10.200.%d.%d"]}`, i%256, j)
			}
			b.WriteString("]}\n")
			continue
		}
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Service\nmetadata: {name: svc-%d, namespace: ns}\nspec:\n  clusterIP: 10.%d.%d.1\n  ports: [{name: http, port: 80}]\n", i, i/256%256, i%256)
		fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: svc-%d-1\n  namespace: ns\n  labels: {kubernetes.io/service-name: svc-%d}\naddressType: IPv4\nports: [{name: http, port: 8080}]\nendpoints:\n", i, i)
		for j := range 10 {
			fmt.Fprintf(&b, "- addresses: [10.200.%d.%d]\n", i%256, j)
		}
	}
	return b.Bytes()
}

func BenchmarkParseObjects(b *testing.B) {
	for _, tc := range []struct {
		name   string
		asJSON bool
	}{{"yaml", false}, {"json", true}} {
		data := bigFile(1000, tc.asJSON)
		b.Run(tc.name+"-1000svc", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				objs, errs := ParseObjects(data)
				if len(objs) != 2000 || len(errs) != 0 {
					b.Fatalf("%d objects, errors %v", len(objs), errs)
				}
			}
		})
	}
}

// BenchmarkLoadOneChange is a reload of a 1,000-service file in which one
// slice changed: parse plus diff.
func BenchmarkLoadOneChange(b *testing.B) {
	path := filepath.Join(b.TempDir(), "objects.json")
	a := bigFile(1000, true)
	c := bytes.Replace(a, []byte(`"10.200.7.3"`), []byte(`"10.200.7.99"`), 1)
	src := New(path, &recorder{}, Options{})
	ctx := context.Background()
	flip := false
	for b.Loop() {
		data := a
		if flip {
			data = c
		}
		flip = !flip
		if err := os.WriteFile(path, data, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := src.Load(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBigFileLines(t *testing.T) {
	data := bigFile(50, true)
	objs, errs := ParseObjects(data)
	if len(errs) != 0 || len(objs) != 100 {
		t.Fatalf("%d objects, %v", len(objs), errs)
	}
	for i, o := range objs {
		if o.Pos.Line != i+1 || o.Pos.Document != i+1 {
			t.Fatalf("object %d at %+v", i, o.Pos)
		}
	}
}
