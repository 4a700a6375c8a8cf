package filesource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/internal/lines"
)

// Kind is one of the object kinds a file may hold.
type Kind string

// The kinds ParseObjects accepts (besides List, whose items it unpacks).
const (
	KindService       Kind = "Service"
	KindEndpointSlice Kind = "EndpointSlice"
	KindEndpoints     Kind = "Endpoints"
	KindNode          Kind = "Node"
)

// apiVersions are the versions accepted for each kind.
var apiVersions = map[Kind]string{
	KindService:       "v1",
	KindEndpointSlice: "discovery.k8s.io/v1",
	KindEndpoints:     "v1",
	KindNode:          "v1",
}

// Key identifies an object in a file: two documents with the same Key are
// a duplicate. Namespace is empty for Nodes.
type Key struct {
	Kind      Kind
	Namespace string
	Name      string
}

func (k Key) String() string {
	if k.Namespace == "" {
		return string(k.Kind) + " " + k.Name
	}
	return string(k.Kind) + " " + k.Namespace + "/" + k.Name
}

// Position says where in a file an object or an error is.
type Position struct {
	// Document is the 1-based index of the YAML document (or JSON value).
	Document int
	// Item is the 0-based index inside a List's items, or -1.
	Item int
	// Line is the 1-based line the document starts on; for an error, the
	// line the parser reported when it named one.
	Line int
}

func (p Position) String() string {
	s := fmt.Sprintf("document %d (line %d)", p.Document, p.Line)
	if p.Item >= 0 {
		s += fmt.Sprintf(", item %d", p.Item)
	}
	return s
}

// Object is one parsed object and where it came from.
type Object struct {
	Key Key
	// Object is a *v1.Service, *discovery.EndpointSlice, *v1.Endpoints or
	// *v1.Node.
	Object runtime.Object
	Pos    Position
}

// Sentinel causes of a ParseError, for errors.Is.
var (
	// ErrSyntax: the document is not valid YAML or JSON.
	ErrSyntax = errors.New("syntax error")
	// ErrMissingKind: the document has no kind.
	ErrMissingKind = errors.New("no kind")
	// ErrUnsupportedKind: a kind (or apiVersion) this source does not read.
	ErrUnsupportedKind = errors.New("unsupported kind")
	// ErrInvalidObject: the object does not decode into its kind, has
	// unknown fields, or lacks something the proxy needs (a name, an
	// EndpointSlice's service-name label or address type).
	ErrInvalidObject = errors.New("invalid object")
	// ErrDuplicate: a second object with the same kind, namespace and name.
	ErrDuplicate = errors.New("duplicate object")
)

// ParseError is one bad document (or List item). It wraps one of the
// sentinel errors above and, when there is one, the decoder's error.
type ParseError struct {
	Pos Position
	// Key is set when the kind and name could be read.
	Key Key
	Err error
}

func (e *ParseError) Error() string {
	if e.Key.Name != "" {
		return fmt.Sprintf("%s: %s: %v", e.Pos, e.Key, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Pos, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// ParseErrors is the list of bad documents of one read; the others were
// applied. It is what Source.Load returns when some documents were bad.
type ParseErrors []*ParseError

func (e ParseErrors) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d bad object(s) skipped", len(e))
	for _, pe := range e {
		b.WriteString("; ")
		b.WriteString(pe.Error())
	}
	return b.String()
}

// Unwrap lets errors.Is and errors.As look into every entry.
func (e ParseErrors) Unwrap() []error {
	out := make([]error, len(e))
	for i, pe := range e {
		out[i] = pe
	}
	return out
}

// ParseObjects reads a file of Kubernetes manifests: YAML documents
// separated by "---" lines, or a stream of JSON values. A document (or JSON
// value) may be a Service (v1), EndpointSlice (discovery.k8s.io/v1),
// Endpoints (v1) or Node (v1), or a List (v1) of those; a JSON array is
// read as a List. Empty documents are ignored.
//
// Objects are decoded strictly (field names are case-sensitive, unknown and
// duplicate fields are errors), so a typo does not go unnoticed. An empty
// namespace becomes "default"; a Node's namespace is cleared; everything
// else the API server defaults is defaulted the same way before validation
// (a port's protocol TCP, targetPort = port, sessionAffinity None and the
// ClientIP timeout, type ClusterIP, traffic policies Cluster, clusterIPs,
// ipFamilies and ipFamilyPolicy from the cluster IPs, an EndpointSlice or
// Endpoints port's protocol TCP), so a file behaves as the same objects
// created through the API.
//
// Every bad document or List item yields one *ParseError giving its
// position and is left out; all others are returned, in file order. A JSON
// syntax error ends the stream (there is no way to resynchronise), a YAML
// one only its document.
func ParseObjects(data []byte) ([]Object, []error) {
	p := &parser{seen: map[Key]Position{}}
	if isJSON(data) {
		p.parseJSONStream(data)
	} else {
		p.parseYAML(data)
	}
	return p.objects, p.errs
}

type parser struct {
	objects []Object
	errs    []error
	seen    map[Key]Position
}

func (p *parser) fail(pos Position, key Key, err error) {
	p.errs = append(p.errs, &ParseError{Pos: pos, Key: key, Err: err})
}

// isJSON reports whether data starts, after blank space, with '{' or '['.
func isJSON(data []byte) bool {
	t := bytes.TrimLeftFunc(data, unicode.IsSpace)
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

func (p *parser) parseJSONStream(data []byte) {
	dec := json.NewDecoder(bytes.NewReader(data))
	counter := lineCounter{data: data}
	for doc := 1; ; doc++ {
		start := dec.InputOffset()
		start += leadingSpace(data[start:])
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			line := counter.at(start)
			var se *json.SyntaxError
			if errors.As(err, &se) {
				line = counter.at(se.Offset)
			}
			p.fail(Position{Document: doc, Item: -1, Line: line}, Key{}, fmt.Errorf("%w: %v", ErrSyntax, err))
			return
		}
		p.parseDocument(raw, Position{Document: doc, Item: -1, Line: counter.at(start)})
	}
}

// lineCounter maps byte offsets to 1-based lines, counting each byte once
// as long as offsets do not go backwards (a big JSON stream stays linear).
type lineCounter struct {
	data []byte
	off  int64
	line int
}

func (c *lineCounter) at(off int64) int {
	off = min(max(off, 0), int64(len(c.data)))
	if c.line == 0 || off < c.off {
		c.off, c.line = 0, 1
	}
	c.line += bytes.Count(c.data[c.off:off], []byte{'\n'})
	c.off = off
	return c.line
}

func leadingSpace(b []byte) int64 {
	return int64(len(b) - len(bytes.TrimLeftFunc(b, unicode.IsSpace)))
}

// yamlDocument is one document's text (aliasing the file's) and its
// first line.
type yamlDocument struct {
	text []byte
	line int
}

// splitYAML splits data at "---" separator lines (which may carry a
// comment), the way kubectl does.
func splitYAML(data []byte) []yamlDocument {
	var docs []yamlDocument
	from, first := 0, 1 // the current document's offset and first line
	n := 0
	sc := lines.New(data)
	for sc.Scan() {
		n++
		if isSeparator(sc.Line()) {
			docs = append(docs, yamlDocument{text: data[from:sc.Start():sc.Start()], line: first})
			from, first = sc.End(), n+1
		}
	}
	docs = append(docs, yamlDocument{text: data[from:len(data):len(data)], line: first})
	return docs
}

// isSeparator reports a "---" line, without its newline.
func isSeparator(line []byte) bool {
	l := bytes.TrimRight(line, "\r")
	if !bytes.HasPrefix(l, []byte("---")) {
		return false
	}
	rest := l[3:]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t'
}

// blank reports a document with nothing but space and comments.
func blank(doc []byte) bool {
	sc := lines.New(doc)
	for sc.Scan() {
		t := bytes.TrimSpace(sc.Line())
		if len(t) != 0 && t[0] != '#' {
			return false
		}
	}
	return true
}

func (p *parser) parseYAML(data []byte) {
	n := 0
	for _, d := range splitYAML(data) {
		if blank(d.text) {
			continue
		}
		n++
		pos := Position{Document: n, Item: -1, Line: d.line}
		j, err := yaml.YAMLToJSON(d.text)
		if err != nil {
			// Re-parse with the document at its place in the file so
			// that the parser's line numbers are the file's.
			padded := append(bytes.Repeat([]byte{'\n'}, d.line-1), d.text...)
			if _, perr := yaml.YAMLToJSON(padded); perr != nil {
				err = perr
			}
			p.fail(pos, Key{}, fmt.Errorf("%w: %v", ErrSyntax, err))
			continue
		}
		p.parseDocument(j, pos)
	}
}

// header is the part of every object read first.
type header struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   json.RawMessage `json:"metadata"`
	Items      json.RawMessage `json:"items"`
}

func (p *parser) parseDocument(j []byte, pos Position) {
	t := bytes.TrimSpace(j)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return // an empty document
	}
	if t[0] == '[' {
		p.parseItems(t, pos, "")
		return
	}
	var h header
	if err := json.Unmarshal(t, &h); err != nil {
		p.fail(pos, Key{}, fmt.Errorf("%w: not an object: %v", ErrInvalidObject, err))
		return
	}
	if itemKind, isList := listKind(h.Kind); isList {
		want := "v1"
		if itemKind != "" {
			want = apiVersions[itemKind]
		}
		if h.APIVersion != want {
			p.fail(pos, Key{}, fmt.Errorf("%w: %s %q (want apiVersion %s)", ErrUnsupportedKind, h.Kind, h.APIVersion, want))
			return
		}
		if h.Items == nil || bytes.Equal(h.Items, []byte("null")) {
			return
		}
		p.parseItems(h.Items, pos, itemKind)
		return
	}
	p.parseObject(t, h, pos)
}

// listKind recognises "List" (any items) and "<Kind>List" for a kind we
// read (items of that kind, which an API server sends without kind).
func listKind(kind string) (itemKind Kind, isList bool) {
	if kind == "List" {
		return "", true
	}
	if k, ok := strings.CutSuffix(kind, "List"); ok {
		if _, known := apiVersions[Kind(k)]; known {
			return Kind(k), true
		}
	}
	return "", false
}

func (p *parser) parseItems(items []byte, pos Position, itemKind Kind) {
	var raws []json.RawMessage
	if err := json.Unmarshal(items, &raws); err != nil {
		p.fail(pos, Key{}, fmt.Errorf("%w: items is not a list: %v", ErrInvalidObject, err))
		return
	}
	for i, raw := range raws {
		ipos := pos
		ipos.Item = i
		var h header
		if err := json.Unmarshal(raw, &h); err != nil {
			p.fail(ipos, Key{}, fmt.Errorf("%w: not an object: %v", ErrInvalidObject, err))
			continue
		}
		if _, isList := listKind(h.Kind); isList {
			p.fail(ipos, Key{}, fmt.Errorf("%w: a List inside a List", ErrUnsupportedKind))
			continue
		}
		if h.Kind == "" && itemKind != "" {
			// Items of a typed list carry no kind; say it for the strict
			// decoder too.
			h.Kind, h.APIVersion = string(itemKind), apiVersions[itemKind]
			raw = withTypeMeta(raw, h.APIVersion, h.Kind)
		}
		p.parseObject(raw, h, ipos)
	}
}

// withTypeMeta adds apiVersion and kind to a JSON object.
func withTypeMeta(raw []byte, apiVersion, kind string) []byte {
	t := bytes.TrimSpace(raw)
	if len(t) < 2 || t[0] != '{' {
		return raw
	}
	head := fmt.Sprintf(`{"apiVersion":%q,"kind":%q`, apiVersion, kind)
	rest := bytes.TrimSpace(t[1:])
	if len(rest) > 0 && rest[0] != '}' {
		head += ","
	}
	return append([]byte(head), rest...)
}

func (p *parser) parseObject(raw []byte, h header, pos Position) {
	var meta metav1.ObjectMeta
	if len(h.Metadata) > 0 {
		_ = json.Unmarshal(h.Metadata, &meta) // checked strictly below
	}
	kind := Kind(h.Kind)
	key := Key{Kind: kind, Namespace: meta.Namespace, Name: meta.Name}
	if kind == KindNode {
		key.Namespace = ""
	} else if key.Namespace == "" {
		key.Namespace = metav1.NamespaceDefault
	}
	if h.Kind == "" {
		p.fail(pos, Key{}, ErrMissingKind)
		return
	}
	want, ok := apiVersions[kind]
	if !ok {
		p.fail(pos, key, fmt.Errorf("%w: %s (want Service, EndpointSlice, Endpoints, Node or List)", ErrUnsupportedKind, h.Kind))
		return
	}
	if h.APIVersion != want {
		p.fail(pos, key, fmt.Errorf("%w: %s %q (want apiVersion %s)", ErrUnsupportedKind, h.Kind, h.APIVersion, want))
		return
	}

	var obj interface {
		runtime.Object
		metav1.Object
	}
	switch kind {
	case KindService:
		obj = &v1.Service{}
	case KindEndpointSlice:
		obj = &discovery.EndpointSlice{}
	case KindEndpoints:
		obj = &v1.Endpoints{}
	case KindNode:
		obj = &v1.Node{}
	}
	strict, err := kjson.UnmarshalStrict(raw, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	if err != nil {
		p.fail(pos, key, fmt.Errorf("%w: %v", ErrInvalidObject, err))
		return
	}

	if kind == KindNode {
		obj.SetNamespace("")
	} else if obj.GetNamespace() == "" {
		obj.SetNamespace(metav1.NamespaceDefault)
	}
	key.Namespace, key.Name = obj.GetNamespace(), obj.GetName()
	applyAPIDefaults(obj)
	if err := validate(kind, obj); err != nil {
		p.fail(pos, key, fmt.Errorf("%w: %v", ErrInvalidObject, err))
		return
	}
	if first, dup := p.seen[key]; dup {
		p.fail(pos, key, fmt.Errorf("%w: first defined at %s", ErrDuplicate, first))
		return
	}
	p.seen[key] = pos
	p.objects = append(p.objects, Object{Key: key, Object: obj, Pos: pos})
}

// validate checks what the proxy needs and an API server would enforce.
func validate(kind Kind, obj metav1.Object) error {
	if obj.GetName() == "" {
		return errors.New("metadata.name is empty")
	}
	if msgs := validation.IsDNS1123Subdomain(obj.GetName()); len(msgs) > 0 {
		return fmt.Errorf("metadata.name %q: %s", obj.GetName(), strings.Join(msgs, "; "))
	}
	if kind != KindNode {
		if msgs := validation.IsDNS1123Label(obj.GetNamespace()); len(msgs) > 0 {
			return fmt.Errorf("metadata.namespace %q: %s", obj.GetNamespace(), strings.Join(msgs, "; "))
		}
	}
	if s, ok := obj.(*discovery.EndpointSlice); ok {
		if s.Labels[discovery.LabelServiceName] == "" {
			return fmt.Errorf("label %s (the owning service) is missing", discovery.LabelServiceName)
		}
		switch s.AddressType {
		case discovery.AddressTypeIPv4, discovery.AddressTypeIPv6, discovery.AddressTypeFQDN:
		case "":
			return errors.New("addressType is missing")
		default:
			return fmt.Errorf("addressType %q is not IPv4, IPv6 or FQDN", s.AddressType)
		}
	}
	return nil
}
