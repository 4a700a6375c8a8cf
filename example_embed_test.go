package svcproxy_test

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/informers"
)

// Example_embed is the README's embedding example: kube-proxy's iptables
// mode inside your own process, fed by client-go informers. (It compiles
// as part of the tests; it is not run, since it needs a cluster and root.)
func Example_embed() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	restConfig, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	client := kubernetes.NewForConfigOrDie(restConfig)

	runner, err := xtables.New(xtables.RunnerConfig{}) // IPv4, iptables on PATH
	if err != nil {
		panic(err)
	}
	proxier, err := iptables.NewProxier(iptables.Config{Common: engine.Common{NodeName: "node-a"}}, iptables.Interfaces{IPTables: runner})
	if err != nil {
		panic(err)
	}

	opts := informers.Options{Stop: ctx.Done()}
	services, _ := informers.NewInformerFactory(client, 15*time.Minute, opts)
	nodes, _ := informers.NewNodeInformerFactory(client, 15*time.Minute, "node-a")
	if err := informers.Register(services, nodes, proxier, opts); err != nil {
		panic(err)
	}
	services.Start(ctx.Done())
	nodes.Start(ctx.Done())
	_ = proxier.Run(ctx) // syncs on change and every sync period until SIGTERM
}
