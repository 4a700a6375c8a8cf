package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// apiHandlers turns handler calls (from proxytest.Feeder) into writes to a
// real API server, so the conformance scenarios reach the proxy the way a
// cluster's changes do: through the API server and the proxy's informers.
// Errors are collected; Err returns them.
type apiHandlers struct {
	client kubernetes.Interface

	mu         sync.Mutex
	errs       []error
	namespaces map[string]bool
}

// ensureNamespace creates ns once (no namespace controller runs, so it is
// never deleted).
func (h *apiHandlers) ensureNamespace(ctx context.Context, ns string) {
	h.mu.Lock()
	done := h.namespaces[ns]
	h.mu.Unlock()
	if done {
		return
	}
	_, err := h.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		h.fail("create namespace "+ns, err)
		return
	}
	h.mu.Lock()
	if h.namespaces == nil {
		h.namespaces = map[string]bool{}
	}
	h.namespaces[ns] = true
	h.mu.Unlock()
}

const apiCallTimeout = 30 * time.Second

func (h *apiHandlers) fail(op string, err error) {
	if err == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, fmt.Errorf("%s: %w", op, err))
}

// Err returns (and clears) the errors of the calls so far.
func (h *apiHandlers) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	errs := h.errs
	h.errs = nil
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d API writes failed, first: %w", len(errs), errs[0])
}

func ctxTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), apiCallTimeout)
}

// clean strips what the Feeder stamps and the server owns.
func cleanMeta(m *metav1.ObjectMeta) {
	m.ResourceVersion = ""
	m.UID = ""
	m.CreationTimestamp = metav1.Time{}
	m.ManagedFields = nil
	m.Generation = 0
}

func (h *apiHandlers) OnServiceAdd(svc *v1.Service) {
	ctx, cancel := ctxTimeout()
	defer cancel()
	s := svc.DeepCopy()
	cleanMeta(&s.ObjectMeta)
	status := s.Status
	s.Status = v1.ServiceStatus{}
	h.ensureNamespace(ctx, s.Namespace)
	created, err := h.client.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		h.fail("create service "+s.Namespace+"/"+s.Name, err)
		return
	}
	h.setServiceStatus(ctx, created, status)
}

func (h *apiHandlers) setServiceStatus(ctx context.Context, cur *v1.Service, status v1.ServiceStatus) {
	if apiequality.Semantic.DeepEqual(cur.Status, status) {
		return
	}
	cur = cur.DeepCopy()
	cur.Status = status
	_, err := h.client.CoreV1().Services(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	h.fail("update service status "+cur.Namespace+"/"+cur.Name, err)
}

func (h *apiHandlers) OnServiceUpdate(old, svc *v1.Service) {
	if old.Spec.ClusterIP != svc.Spec.ClusterIP {
		// The cluster IP is immutable: replace the Service, as a user must.
		h.OnServiceDelete(old)
		h.OnServiceAdd(svc)
		return
	}
	ctx, cancel := ctxTimeout()
	defer cancel()
	var updated *v1.Service
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := h.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		next := cur.DeepCopy()
		next.Labels = svc.Labels
		next.Annotations = svc.Annotations
		next.Spec = *svc.Spec.DeepCopy()
		// Allocated values the desired state leaves to the server.
		if next.Spec.ClusterIP == "" {
			next.Spec.ClusterIP = cur.Spec.ClusterIP
		}
		if len(next.Spec.ClusterIPs) == 0 {
			next.Spec.ClusterIPs = cur.Spec.ClusterIPs
		}
		updated, err = h.client.CoreV1().Services(svc.Namespace).Update(ctx, next, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		h.fail("update service "+svc.Namespace+"/"+svc.Name, err)
		return
	}
	h.setServiceStatus(ctx, updated, svc.Status)
}

func (h *apiHandlers) OnServiceDelete(svc *v1.Service) {
	ctx, cancel := ctxTimeout()
	defer cancel()
	h.fail("delete service "+svc.Namespace+"/"+svc.Name,
		ignoreNotFound(h.client.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{})))
}

func (h *apiHandlers) OnServiceSynced() {}

func (h *apiHandlers) OnEndpointSliceAdd(slice *discovery.EndpointSlice) {
	ctx, cancel := ctxTimeout()
	defer cancel()
	s := slice.DeepCopy()
	cleanMeta(&s.ObjectMeta)
	h.ensureNamespace(ctx, s.Namespace)
	_, err := h.client.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
	h.fail("create endpointslice "+s.Namespace+"/"+s.Name, err)
}

func (h *apiHandlers) OnEndpointSliceUpdate(_, slice *discovery.EndpointSlice) {
	ctx, cancel := ctxTimeout()
	defer cancel()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := h.client.DiscoveryV1().EndpointSlices(slice.Namespace).Get(ctx, slice.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		next := slice.DeepCopy()
		next.ObjectMeta = *cur.ObjectMeta.DeepCopy()
		next.Labels = slice.Labels
		next.Annotations = slice.Annotations
		_, err = h.client.DiscoveryV1().EndpointSlices(slice.Namespace).Update(ctx, next, metav1.UpdateOptions{})
		return err
	})
	h.fail("update endpointslice "+slice.Namespace+"/"+slice.Name, err)
}

func (h *apiHandlers) OnEndpointSliceDelete(slice *discovery.EndpointSlice) {
	ctx, cancel := ctxTimeout()
	defer cancel()
	h.fail("delete endpointslice "+slice.Namespace+"/"+slice.Name,
		ignoreNotFound(h.client.DiscoveryV1().EndpointSlices(slice.Namespace).Delete(ctx, slice.Name, metav1.DeleteOptions{})))
}

func (h *apiHandlers) OnEndpointSlicesSynced() {}

func (h *apiHandlers) OnNodeAdd(node *v1.Node) { h.putNode(node) }

func (h *apiHandlers) OnNodeUpdate(_, node *v1.Node) { h.putNode(node) }

// putNode creates the Node or updates its labels (the e2e test creates the
// Node before the proxy starts; scenarios only change its labels).
func (h *apiHandlers) putNode(node *v1.Node) {
	ctx, cancel := ctxTimeout()
	defer cancel()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := h.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			n := node.DeepCopy()
			cleanMeta(&n.ObjectMeta)
			created, err := h.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			// Addresses are status: written separately.
			if !apiequality.Semantic.DeepEqual(created.Status.Addresses, node.Status.Addresses) {
				created.Status.Addresses = node.Status.Addresses
				_, err = h.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
			}
			return err
		}
		if apiequality.Semantic.DeepEqual(cur.Labels, node.Labels) {
			return nil
		}
		next := cur.DeepCopy()
		next.Labels = node.Labels
		_, err = h.client.CoreV1().Nodes().Update(ctx, next, metav1.UpdateOptions{})
		return err
	})
	h.fail("put node "+node.Name, err)
}

// OnNodeDelete is ignored: the proxy's own Node stays for the whole test
// (deleting it would only make /healthz fail, which is tested elsewhere).
func (h *apiHandlers) OnNodeDelete(*v1.Node) {}

func (h *apiHandlers) OnNodeSynced() {}

// ignoreNotFound: deleting what is already gone is no failure (the feeder
// may delete an object whose create failed).
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
