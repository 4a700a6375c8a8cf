// Package healthcheck serves the two kinds of health checks kube-proxy
// serves, with the same paths, status codes, headers and JSON bodies.
//
// ProxyHealthServer answers /healthz and /livez about the proxy itself
// (kube-proxy's healthzBindAddress, port 10256 by default). Engines report
// QueuedUpdate when they record a change and Updated after each successful
// sync; the server answers 503 before the first sync and whenever a change
// has waited HealthTimeout (twice the sync period) without a sync, and
// /healthz also answers 503 when the node is unknown, being deleted, or
// tainted ToBeDeletedByClusterAutoscaler.
//
// ServiceHealthServer opens one HTTP port per service with
// externalTrafficPolicy Local (its healthCheckNodePort) and answers 200
// when the node has local ready endpoints for it and the proxy is healthy,
// 503 otherwise. A port that cannot be opened is a logged, counted
// *ListenError for that service only; it is retried on the next sync.
// The engines of a dual-stack proxy share one server through per-family
// views (Family), so neither overwrites the other's services or counts.
//
// Sockets are opened through the Listener interface and time is read from
// an injectable clock, so tests run on loopback ephemeral ports with a fake
// clock. Nothing here needs root.
package healthcheck
