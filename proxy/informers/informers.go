package informers

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy"
)

// Options configures the informer glue. Pass the same Options to
// NewInformerFactory and Register.
type Options struct {
	// ServiceProxyName, when set, makes this proxy handle only the objects
	// labelled service.kubernetes.io/service-proxy-name=<ServiceProxyName>.
	// When empty, it handles only objects without that label (kube-proxy's
	// behaviour).
	ServiceProxyName string
	// UseEndpoints watches legacy v1 Endpoints instead of EndpointSlices
	// and hands them to the provider converted to slices
	// (changetracker.EndpointsToSlices).
	UseEndpoints bool
	// Stop, when closed, ends the goroutines that wait for the informers'
	// initial lists to report the Synced handlers. nil: they run until the
	// lists are synced, however long that takes.
	Stop <-chan struct{}
	// Logger receives skipped events (V(2)) and registration details. The
	// zero value discards.
	Logger logr.Logger
}

// LabelSelector returns the label selector kube-proxy applies to every
// Service, EndpointSlice and Endpoints watch: no
// service.kubernetes.io/headless label (headless services have nothing to
// proxy), and either no service.kubernetes.io/service-proxy-name label or,
// when serviceProxyName is set, that label equal to it.
func LabelSelector(serviceProxyName string) (labels.Selector, error) {
	var proxyName *labels.Requirement
	var err error
	if serviceProxyName == "" {
		proxyName, err = labels.NewRequirement(proxy.LabelServiceProxyName, selection.DoesNotExist, nil)
	} else {
		proxyName, err = labels.NewRequirement(proxy.LabelServiceProxyName, selection.In, []string{serviceProxyName})
	}
	if err != nil {
		return nil, fmt.Errorf("informers: service proxy name %q: %w", serviceProxyName, err)
	}
	noHeadless, err := labels.NewRequirement(proxy.LabelHeadless, selection.DoesNotExist, nil)
	if err != nil {
		return nil, err
	}
	return labels.NewSelector().Add(*proxyName, *noHeadless), nil
}

// serviceFieldSelector leaves out headless services, as kube-proxy does.
var serviceFieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", v1.ClusterIPNone).String()

// NewInformerFactory returns a shared informer factory whose watches carry
// LabelSelector(opts.ServiceProxyName), for the Services and the
// EndpointSlices (or Endpoints) of Register. It fails only for a
// ServiceProxyName that is not a valid label value.
func NewInformerFactory(client kubernetes.Interface, resync time.Duration, opts Options) (informers.SharedInformerFactory, error) {
	sel, err := LabelSelector(opts.ServiceProxyName)
	if err != nil {
		return nil, err
	}
	s := sel.String()
	return informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = s }),
	), nil
}

// NewNodeInformerFactory returns a shared informer factory that watches
// only the Node named nodeName (field selector metadata.name).
func NewNodeInformerFactory(client kubernetes.Interface, resync time.Duration, nodeName string) (informers.SharedInformerFactory, error) {
	if nodeName == "" {
		return nil, errors.New("informers: node name is empty")
	}
	sel := fields.OneTermEqualSelector("metadata.name", nodeName).String()
	return informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = sel }),
	), nil
}

// Handlers is what Register feeds: every proxy.Provider, and also a bare
// *changetracker.Tracker or a fan-out of your own.
type Handlers interface {
	proxy.ServiceHandler
	proxy.EndpointSliceHandler
	proxy.NodeHandler
}

// Register wires the provider's handlers to informers of factory (Services,
// and EndpointSlices or, with opts.UseEndpoints, legacy Endpoints) and of
// nodeFactory (the Node; nodeFactory may be nil when the provider needs no
// node). Call it before starting the factories.
//
// The Services informer is created here with LabelSelector and the field
// selector spec.clusterIP!=None (kube-proxy's), so Register must be the
// first to ask factory for a Services informer.
//
// Once each informer has delivered its initial list to the provider,
// OnServiceSynced, OnEndpointSlicesSynced and OnNodeSynced are called, once
// each, from a goroutine of Register's (ended by opts.Stop).
//
// Delete events carrying cache.DeletedFinalStateUnknown are unwrapped;
// events of an unexpected type are logged and skipped.
func Register(factory, nodeFactory informers.SharedInformerFactory, provider Handlers, opts Options) error {
	if factory == nil {
		return errors.New("informers: nil informer factory")
	}
	if provider == nil {
		return errors.New("informers: nil provider")
	}
	sel, err := LabelSelector(opts.ServiceProxyName)
	if err != nil {
		return err
	}
	r := &registrar{provider: provider, log: opts.Logger}
	labelSelector := sel.String()

	svcInformer := factory.InformerFor(&v1.Service{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredServiceInformer(c, metav1.NamespaceAll, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			func(o *metav1.ListOptions) {
				o.LabelSelector = labelSelector
				o.FieldSelector = serviceFieldSelector
			})
	})
	svcReg, err := svcInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.serviceAdd,
		UpdateFunc: r.serviceUpdate,
		DeleteFunc: r.serviceDelete,
	})
	if err != nil {
		return fmt.Errorf("informers: registering the service handler: %w", err)
	}
	waitSynced(opts.Stop, svcReg, provider.OnServiceSynced)

	var epReg cache.ResourceEventHandlerRegistration
	if opts.UseEndpoints {
		epReg, err = factory.Core().V1().Endpoints().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    r.endpointsAdd,
			UpdateFunc: r.endpointsUpdate,
			DeleteFunc: r.endpointsDelete,
		})
	} else {
		epReg, err = factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    r.sliceAdd,
			UpdateFunc: r.sliceUpdate,
			DeleteFunc: r.sliceDelete,
		})
	}
	if err != nil {
		return fmt.Errorf("informers: registering the endpoints handler: %w", err)
	}
	waitSynced(opts.Stop, epReg, provider.OnEndpointSlicesSynced)

	if nodeFactory != nil {
		nodeReg, err := nodeFactory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    r.nodeAdd,
			UpdateFunc: r.nodeUpdate,
			DeleteFunc: r.nodeDelete,
		})
		if err != nil {
			return fmt.Errorf("informers: registering the node handler: %w", err)
		}
		waitSynced(opts.Stop, nodeReg, provider.OnNodeSynced)
	}
	return nil
}

// waitSynced calls synced once reg has delivered its initial list.
func waitSynced(stop <-chan struct{}, reg cache.ResourceEventHandlerRegistration, synced func()) {
	go func() {
		if cache.WaitForCacheSync(stop, reg.HasSynced) {
			synced()
		}
	}()
}

// registrar turns informer events into provider calls.
type registrar struct {
	provider Handlers
	log      logr.Logger
	// skipped counts events dropped for an unexpected object type.
	skipped atomic.Int64
}

// unwrap returns obj, or the object inside a DeletedFinalStateUnknown.
func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

func as[T any](r *registrar, event string, obj any) (T, bool) {
	t, ok := unwrap(obj).(T)
	if !ok {
		r.skipped.Add(1)
		r.log.V(2).Info("Skipping event with an unexpected object type", "event", event, "type", fmt.Sprintf("%T", obj))
	}
	return t, ok
}

func (r *registrar) serviceAdd(obj any) {
	if s, ok := as[*v1.Service](r, "service add", obj); ok {
		r.provider.OnServiceAdd(s)
	}
}

func (r *registrar) serviceUpdate(oldObj, newObj any) {
	o, ok1 := as[*v1.Service](r, "service update", oldObj)
	n, ok2 := as[*v1.Service](r, "service update", newObj)
	if ok1 && ok2 {
		r.provider.OnServiceUpdate(o, n)
	}
}

func (r *registrar) serviceDelete(obj any) {
	if s, ok := as[*v1.Service](r, "service delete", obj); ok {
		r.provider.OnServiceDelete(s)
	}
}

func (r *registrar) sliceAdd(obj any) {
	if s, ok := as[*discovery.EndpointSlice](r, "endpointslice add", obj); ok {
		r.provider.OnEndpointSliceAdd(s)
	}
}

func (r *registrar) sliceUpdate(oldObj, newObj any) {
	o, ok1 := as[*discovery.EndpointSlice](r, "endpointslice update", oldObj)
	n, ok2 := as[*discovery.EndpointSlice](r, "endpointslice update", newObj)
	if ok1 && ok2 {
		r.provider.OnEndpointSliceUpdate(o, n)
	}
}

func (r *registrar) sliceDelete(obj any) {
	if s, ok := as[*discovery.EndpointSlice](r, "endpointslice delete", obj); ok {
		r.provider.OnEndpointSliceDelete(s)
	}
}

func (r *registrar) endpointsAdd(obj any) {
	if e, ok := as[*v1.Endpoints](r, "endpoints add", obj); ok {
		changetracker.ApplyEndpointsChange(r.provider, nil, e)
	}
}

func (r *registrar) endpointsUpdate(oldObj, newObj any) {
	o, ok1 := as[*v1.Endpoints](r, "endpoints update", oldObj)
	n, ok2 := as[*v1.Endpoints](r, "endpoints update", newObj)
	if ok1 && ok2 {
		changetracker.ApplyEndpointsChange(r.provider, o, n)
	}
}

func (r *registrar) endpointsDelete(obj any) {
	if e, ok := as[*v1.Endpoints](r, "endpoints delete", obj); ok {
		changetracker.ApplyEndpointsChange(r.provider, e, nil)
	}
}

func (r *registrar) nodeAdd(obj any) {
	if n, ok := as[*v1.Node](r, "node add", obj); ok {
		r.provider.OnNodeAdd(n)
	}
}

func (r *registrar) nodeUpdate(oldObj, newObj any) {
	o, ok1 := as[*v1.Node](r, "node update", oldObj)
	n, ok2 := as[*v1.Node](r, "node update", newObj)
	if ok1 && ok2 {
		r.provider.OnNodeUpdate(o, n)
	}
}

func (r *registrar) nodeDelete(obj any) {
	if n, ok := as[*v1.Node](r, "node delete", obj); ok {
		r.provider.OnNodeDelete(n)
	}
}
