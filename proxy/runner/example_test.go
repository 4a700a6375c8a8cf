package runner_test

import (
	"context"
	"fmt"
	"time"

	"github.com/svcproxy/svcproxy/proxy/runner"
)

func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	synced := make(chan struct{})
	r := runner.New("sync", func(ctx context.Context) error {
		fmt.Println("syncing the node")
		cancel() // stop after one run
		close(synced)
		return nil
	}, runner.Config{MinInterval: time.Second, MaxInterval: time.Hour})

	// Handlers call Trigger whenever they record a change; many calls
	// before the run collapse into one.
	r.Trigger()
	r.Trigger()

	if err := r.Run(ctx); err != nil {
		fmt.Println("error:", err)
	}
	<-synced
	fmt.Println("stopped")
	// Output:
	// syncing the node
	// stopped
}
