package filesource

import (
	"errors"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

type wantErr struct {
	is   error
	pos  Position
	text string // substring of the message
}

func checkErrs(t *testing.T, errs []error, want []wantErr) {
	t.Helper()
	if len(errs) != len(want) {
		t.Fatalf("got %d errors %v, want %d", len(errs), errs, len(want))
	}
	for i, w := range want {
		var pe *ParseError
		if !errors.As(errs[i], &pe) {
			t.Fatalf("error %d (%v) is not a *ParseError", i, errs[i])
		}
		if !errors.Is(errs[i], w.is) {
			t.Errorf("error %d = %v, want %v", i, errs[i], w.is)
		}
		if pe.Pos != w.pos {
			t.Errorf("error %d at %+v, want %+v (%v)", i, pe.Pos, w.pos, pe)
		}
		if !strings.Contains(errs[i].Error(), w.text) {
			t.Errorf("error %d = %q, want it to contain %q", i, errs[i], w.text)
		}
	}
}

func keys(objs []Object) string {
	var s []string
	for _, o := range objs {
		s = append(s, o.Key.String())
	}
	return strings.Join(s, ", ")
}

func TestParseTestdata(t *testing.T) {
	data, err := os.ReadFile("testdata/objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, errs := ParseObjects(data)
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	if got, want := keys(objs), "Service shop/web, EndpointSlice shop/web-abc, Endpoints shop/legacy, Node node-a"; got != want {
		t.Fatalf("objects %s, want %s", got, want)
	}
	wantPos := []Position{{1, -1, 3}, {2, -1, 19}, {3, -1, 39}, {4, -1, 48}}
	for i, o := range objs {
		if o.Pos != wantPos[i] {
			t.Errorf("%s at %+v, want %+v", o.Key, o.Pos, wantPos[i])
		}
	}
	svc := objs[0].Object.(*v1.Service)
	if svc.Spec.ClusterIP != "10.96.0.10" || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[1].Protocol != v1.ProtocolUDP {
		t.Errorf("service decoded wrongly: %+v", svc.Spec)
	}
	sl := objs[1].Object.(*discovery.EndpointSlice)
	if *sl.Endpoints[0].NodeName != "node-a" || !*sl.Endpoints[0].Conditions.Ready {
		t.Errorf("slice decoded wrongly: %+v", sl.Endpoints)
	}
}

func TestParseObjects(t *testing.T) {
	const svc = "apiVersion: v1\nkind: Service\nmetadata: {name: %s}\nspec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n"
	tests := []struct {
		name     string
		in       string
		wantKeys string
		wantErrs []wantErr
	}{
		{
			name:     "empty file",
			in:       "",
			wantKeys: "",
		},
		{
			name:     "only comments and separators",
			in:       "# nothing\n---\n---\n  # here\n",
			wantKeys: "",
		},
		{
			name:     "namespace defaults to default",
			in:       strings.ReplaceAll(svc, "%s", "a"),
			wantKeys: "Service default/a",
		},
		{
			name: "YAML syntax error skips only its document, with the file's line",
			in: strings.ReplaceAll(svc, "%s", "a") + "---\nkind: Service\nmetadata:\n  name: [b\n" +
				"---\n" + strings.ReplaceAll(svc, "%s", "c"),
			wantKeys: "Service default/a, Service default/c",
			wantErrs: []wantErr{{ErrSyntax, Position{2, -1, 6}, "line 8"}},
		},
		{
			name:     "unknown kind",
			in:       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
			wantErrs: []wantErr{{ErrUnsupportedKind, Position{1, -1, 1}, "Pod"}},
		},
		{
			name:     "wrong apiVersion",
			in:       "apiVersion: discovery.k8s.io/v1beta1\nkind: EndpointSlice\nmetadata: {name: s}\naddressType: IPv4\n",
			wantErrs: []wantErr{{ErrUnsupportedKind, Position{1, -1, 1}, "want apiVersion discovery.k8s.io/v1"}},
		},
		{
			name:     "missing kind",
			in:       "apiVersion: v1\nmetadata: {name: x}\n",
			wantErrs: []wantErr{{ErrMissingKind, Position{1, -1, 1}, "no kind"}},
		},
		{
			name:     "unknown field is an error",
			in:       "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIp: 10.0.0.1}\n",
			wantErrs: []wantErr{{ErrInvalidObject, Position{1, -1, 1}, "clusterIp"}},
		},
		{
			name:     "wrong type is an error",
			in:       "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: eighty}]}\n",
			wantErrs: []wantErr{{ErrInvalidObject, Position{1, -1, 1}, "Service default/a"}},
		},
		{
			name:     "missing name",
			in:       "apiVersion: v1\nkind: Service\nmetadata: {namespace: x}\n",
			wantErrs: []wantErr{{ErrInvalidObject, Position{1, -1, 1}, "metadata.name is empty"}},
		},
		{
			name:     "bad name",
			in:       "apiVersion: v1\nkind: Node\nmetadata: {name: Node_A}\n",
			wantErrs: []wantErr{{ErrInvalidObject, Position{1, -1, 1}, "Node_A"}},
		},
		{
			name:     "slice without its service label",
			in:       "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s}\naddressType: IPv4\n",
			wantErrs: []wantErr{{ErrInvalidObject, Position{1, -1, 1}, "kubernetes.io/service-name"}},
		},
		{
			name:     "slice without address type",
			in:       "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s, labels: {kubernetes.io/service-name: a}}\n",
			wantErrs: []wantErr{{ErrInvalidObject, Position{1, -1, 1}, "addressType"}},
		},
		{
			name:     "duplicate keeps the first",
			in:       strings.ReplaceAll(svc, "%s", "a") + "---\n" + strings.ReplaceAll(svc, "%s", "a"),
			wantKeys: "Service default/a",
			wantErrs: []wantErr{{ErrDuplicate, Position{2, -1, 6}, "first defined at document 1 (line 1)"}},
		},
		{
			name:     "same name, different kinds or namespaces, is no duplicate",
			in:       "apiVersion: v1\nkind: Endpoints\nmetadata: {name: a}\n---\n" + strings.ReplaceAll(svc, "%s", "a") + "---\napiVersion: v1\nkind: Endpoints\nmetadata: {name: a, namespace: b}\n",
			wantKeys: "Endpoints default/a, Service default/a, Endpoints b/a",
		},
		{
			name: "List with a bad item",
			in: "apiVersion: v1\nkind: List\nitems:\n" +
				"- {apiVersion: v1, kind: Service, metadata: {name: a}}\n" +
				"- {apiVersion: v1, kind: Secret, metadata: {name: s}}\n" +
				"- {apiVersion: v1, kind: Node, metadata: {name: node-n, namespace: ignored}}\n",
			wantKeys: "Service default/a, Node node-n",
			wantErrs: []wantErr{{ErrUnsupportedKind, Position{1, 1, 1}, "item 1"}},
		},
		{
			name:     "typed list items need no kind",
			in:       `{"apiVersion":"v1","kind":"ServiceList","items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b","namespace":"x"}}]}`,
			wantKeys: "Service default/a, Service x/b",
		},
		{
			name:     "typed list with the wrong apiVersion",
			in:       `{"apiVersion":"v1","kind":"EndpointSliceList","items":[]}`,
			wantErrs: []wantErr{{ErrUnsupportedKind, Position{1, -1, 1}, "discovery.k8s.io/v1"}},
		},
		{
			name:     "list in a list",
			in:       `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"List","items":[]}]}`,
			wantErrs: []wantErr{{ErrUnsupportedKind, Position{1, 0, 1}, "inside a List"}},
		},
		{
			name:     "JSON stream",
			in:       "\n{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"a\"}}\n\n{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"b\"}}",
			wantKeys: "Node a, Node b",
		},
		{
			name:     "JSON array",
			in:       `[{"apiVersion":"v1","kind":"Node","metadata":{"name":"a"}}, 5]`,
			wantKeys: "Node a",
			wantErrs: []wantErr{{ErrInvalidObject, Position{1, 1, 1}, "not an object"}},
		},
		{
			name:     "JSON syntax error ends the stream",
			in:       "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"a\"}}\n{\"kind\": \n,}\n{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"c\"}}",
			wantKeys: "Node a",
			wantErrs: []wantErr{{ErrSyntax, Position{2, -1, 3}, "invalid character"}},
		},
		{
			name:     "JSON duplicate field",
			in:       `{"apiVersion":"v1","kind":"Node","metadata":{"name":"a","name":"b"}}`,
			wantErrs: []wantErr{{ErrInvalidObject, Position{1, -1, 1}, "duplicate field"}},
		},
		{
			name:     "YAML scalar document",
			in:       "just text\n",
			wantErrs: []wantErr{{ErrInvalidObject, Position{1, -1, 1}, "not an object"}},
		},
		{
			name:     "separator with trailing text is not a separator",
			in:       "---x: 1\n",
			wantErrs: []wantErr{{ErrMissingKind, Position{1, -1, 1}, ""}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, errs := ParseObjects([]byte(tc.in))
			if got := keys(objs); got != tc.wantKeys {
				t.Errorf("objects %q, want %q", got, tc.wantKeys)
			}
			checkErrs(t, errs, tc.wantErrs)
		})
	}
}

func TestParseErrorsList(t *testing.T) {
	_, errs := ParseObjects([]byte("apiVersion: v1\nmetadata: {name: x}\n---\nkind: Secret\napiVersion: v1\nmetadata: {name: s}\n"))
	var pes ParseErrors
	for _, e := range errs {
		pes = append(pes, e.(*ParseError))
	}
	var err error = pes
	if !errors.Is(err, ErrUnsupportedKind) || !errors.Is(err, ErrMissingKind) {
		t.Errorf("errors.Is does not see into %v", err)
	}
	if !strings.HasPrefix(err.Error(), "2 bad object(s) skipped; document 1 (line 1): no kind; document 2 (line 4): Secret default/s") {
		t.Errorf("message %q", err)
	}
}
