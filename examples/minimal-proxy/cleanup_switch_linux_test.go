package main

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// --cleanup honours the legacy writer's switches: with
// --iptables-legacy-restore-tool, or SVCPROXY_IPTABLES_LEGACY_IN_PROCESS=0,
// the legacy Runners it builds restore through the tool.
func TestCleanupHonoursLegacySwitch(t *testing.T) {
	if _, err := exec.LookPath("iptables-legacy-restore"); err != nil {
		t.Skipf("needs iptables-legacy: %v", err)
	}
	for _, tc := range []struct {
		name string
		flag bool
		env  string
		want string
	}{
		{"default", false, "", "Restoring iptables-legacy tables from the process"},
		{"flag", true, "", "switched off (RunnerConfig.LegacyTool"},
		{"env", false, "0", "SVCPROXY_IPTABLES_LEGACY_IN_PROCESS=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SVCPROXY_IPTABLES_LEGACY_IN_PROCESS", tc.env)
			var mu sync.Mutex
			var msgs []string
			log := funcr.New(func(prefix, args string) {
				mu.Lock()
				defer mu.Unlock()
				msgs = append(msgs, args)
			}, funcr.Options{})
			netnstest.InFreshNetns(t, func() {
				if err := cleanupAll(context.Background(), &options{legacyRestoreTool: tc.flag}, log); err != nil {
					t.Fatalf("cleanup: %v", err)
				}
			})
			all := strings.Join(msgs, "\n")
			if !strings.Contains(all, tc.want) {
				t.Errorf("cleanup's log lacks %q:\n%s", tc.want, all)
			}
		})
	}
}
