import sys
n = int(sys.argv[1]); eps = int(sys.argv[2]); gen = int(sys.argv[3]) if len(sys.argv) > 3 else 0
out = ["""apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {kubernetes.io/hostname: node-a}
spec:
  podCIDR: 10.128.0.0/16
  podCIDRs: [10.128.0.0/16]
status:
  addresses:
  - {type: InternalIP, address: 192.168.1.10}"""]
for i in range(n):
    cip = "172.30.%d.%d" % (i // 250, i % 250 + 1)
    out.append("""apiVersion: v1
kind: Service
metadata: {name: svc-%d, namespace: ns}
spec:
  type: ClusterIP
  clusterIP: %s
  clusterIPs: [%s]
  ipFamilies: [IPv4]
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP}""" % (i, cip, cip))
    addrs = []
    for j in range(eps):
        k = i * eps + j
        last = k % 250 + 1
        if i == 0 and j == 0:
            last = 250 - gen % 200  # the endpoint the run changes
            addrs.append("10.%d.%d.%d" % (129 + gen % 2, 0, last)); continue
        addrs.append("10.%d.%d.%d" % (128 + 2 * ((k // 250) // 250) + 2, (k // 250) % 250, last))
    out.append("""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: svc-%d-x
  namespace: ns
  labels: {kubernetes.io/service-name: svc-%d}
addressType: IPv4
ports:
- {name: http, port: 8080, protocol: TCP}
endpoints:
%s""" % (i, i, "\n".join("- addresses: [%s]\n  conditions: {ready: true}\n  nodeName: node-b" % a for a in addrs)))
print("\n---\n".join(out))
