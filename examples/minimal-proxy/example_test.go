package main

import (
	"context"
	"fmt"
	"strings"
)

// Example runs the README's first command in-process: the iptables mode's
// plan for demo.yaml, printed without touching the node. Here only the
// rules of the ClusterIP service default/web are shown.
func Example() {
	var out strings.Builder
	code := run(context.Background(), []string{"--objects-file", "demo.yaml", "--dry-run"}, &out, discardWriter{})
	fmt.Println("exit", code)
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "# minimal-proxy") ||
			(strings.Contains(line, "default/web:http") && strings.HasPrefix(line, "-A KUBE-SERVICES")) ||
			(strings.Contains(line, "default/web:http") && strings.Contains(line, "DNAT")) {
			fmt.Println(line)
		}
	}
	// Output:
	// exit 0
	// # minimal-proxy dry run: mode iptables, node node-a, node IPs [192.168.1.10]
	// -A KUBE-SEP-UIQK3OSOSTRHRPBX -m comment --comment default/web:http -m tcp -p tcp -j DNAT --to-destination 10.244.1.2:8080
	// -A KUBE-SEP-4EX2N4PG4ASNZOBF -m comment --comment default/web:http -m tcp -p tcp -j DNAT --to-destination 10.244.2.2:8080
	// -A KUBE-SERVICES -m comment --comment "default/web:http cluster IP" -m tcp -p tcp -d 10.96.10.10 --dport 80 -j KUBE-SVC-CDGGSHYLG3RE2FKL
	// -A KUBE-SERVICES -m comment --comment "default/web:http external IP" -m tcp -p tcp -d 192.0.2.50 --dport 80 -j KUBE-EXT-CDGGSHYLG3RE2FKL
}

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
