package main

// Interim: a minimal objects-file loader with the shape of proxy/filesource
// (being written by another engineer). It loads once and does not reload;
// it is deleted when proxy/filesource lands.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/svcproxy/svcproxy/proxy"
)

type fsOptions struct {
	NodeName string
	Interval time.Duration
	Logger   logr.Logger
}

type fsShim struct {
	path string
	p    proxy.Provider
}

var filesource = struct {
	ParseObjects func([]byte) ([]runtime.Object, []error)
	New          func(string, proxy.Provider, fsOptions) *fsShim
}{ParseObjects: shimParse, New: func(path string, p proxy.Provider, _ fsOptions) *fsShim { return &fsShim{path, p} }}

func shimParse(data []byte) ([]runtime.Object, []error) {
	r := utilyaml.NewYAMLReader(bufioReader(data))
	var out []runtime.Object
	var errs []error
	for i := 0; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			break
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			continue
		}
		out = append(out, obj)
	}
	return out, errs
}

func (s *fsShim) Load(ctx context.Context) error {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return err
	}
	objs, errs := shimParse(data)
	if len(errs) > 0 {
		return errs[0]
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.Service:
			s.p.OnServiceAdd(o)
		case *discovery.EndpointSlice:
			s.p.OnEndpointSliceAdd(o)
		case *v1.Node:
			s.p.OnNodeAdd(o)
		}
	}
	s.p.OnServiceSynced()
	s.p.OnEndpointSlicesSynced()
	s.p.OnNodeSynced()
	return nil
}

func (s *fsShim) Run(ctx context.Context) error {
	if err := s.Load(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
