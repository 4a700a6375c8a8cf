package xtblob_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"iter"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/internal/memfd"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/xtblob"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// payloadService is service i of the engine benchmarks' workload
// (iptables/bench_test.go): ClusterIP TCP/80, every 10th a NodePort, 10
// ready endpoints.
func payloadService(i int) (*v1.Service, *discovery.EndpointSlice) {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i%100), Name: fmt.Sprintf("svc%d", i)},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
			ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	if i%10 == 0 {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = int32(30000 + i/10)
	}
	sl := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name + "-abc", Labels: map[string]string{discovery.LabelServiceName: s.Name}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for e := range 10 {
		n := i*10 + e
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 128+n/65536%128, n/256%256, n%256)},
			NodeName:   ptr.To("node-b"),
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	return s, sl
}

// enginePayloads are the iptables-restore inputs of the iptables engine's
// first sync of n services, recorded over iptablestest's fake.
func enginePayloads(tb testing.TB, n int) [][]byte {
	tb.Helper()
	var got [][]byte
	for _, in := range engineTypedPayloads(tb, n) {
		got = append(got, in.Text)
	}
	return got
}

// typedRecorder records every restore's input, with its ops when the
// engine typed it (RestoreInput.Ops).
type typedRecorder struct {
	xtables.Runner
	got []xtables.RestoreInput
}

func (r *typedRecorder) Restore(ctx context.Context, in xtables.RestoreInput) error {
	r.got = append(r.got, xtables.RestoreInput{Text: bytes.Clone(in.Text), Ops: slices.Clone(in.Ops)})
	return r.Runner.Restore(ctx, in)
}

// engineTypedPayloads is enginePayloads with the ops the engine typed
// them with (none for the inputs it restores as text).
func engineTypedPayloads(tb testing.TB, n int) []xtables.RestoreInput {
	tb.Helper()
	f := &typedRecorder{Runner: iptablestest.NewFake(v1.IPv4Protocol)}
	p, err := iptables.NewProxier(iptables.Config{
		Common: engine.Common{NodeName: "node-a"},
		Netfilter: engine.Netfilter{
			LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.128.0.0/9")},
		},
	}, iptables.Interfaces{IPTables: f})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		s, sl := payloadService(i)
		p.OnServiceAdd(s)
		p.OnEndpointSliceAdd(sl)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	if err := p.Sync(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return f.got
}

// linesOf types an input's lines for RestoreOptions.Lines as the xtables
// Runner does from the engine's ops (nil: untyped).
func linesOf(ops []xtables.RestoreOp) iter.Seq[xtblob.Line] {
	if len(ops) == 0 {
		return nil
	}
	return func(yield func(xtblob.Line) bool) {
		for _, o := range ops {
			l := xtblob.Line{End: o.End}
			switch o.Kind {
			case xtables.RestoreDeclare:
				l.Kind, l.Name = xtblob.LineDeclare, o.Name
			case xtables.RestoreAppend:
				l.Kind, l.Name = xtblob.LineAppend, o.Name
			}
			if !yield(l) {
				return
			}
		}
	}
}

func toolRestore(input []byte) error {
	cmd := exec.Command("iptables-legacy-restore", "--noflush", "-w", "5")
	in, err := memfd.File("xtblob-tool-input", input)
	if err != nil {
		return err
	}
	defer in.Close()
	cmd.Stdin = in
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func saveAll(tb testing.TB) string {
	tb.Helper()
	var raw []byte
	for _, table := range []string{"filter", "nat", "mangle"} {
		r, err := xtblob.RawForTest(xtblob.IPv4, table)
		if err != nil {
			tb.Fatal(err)
		}
		raw = append(raw, r...)
	}
	out, err := exec.Command("iptables-legacy-save", "-c").Output()
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(string(out), "\n") {
		if !strings.HasPrefix(l, "#") {
			b.WriteString(l)
		}
	}
	return b.String() + fmt.Sprintf("raw %x", sha256.Sum256(raw))
}

// TestKernelEnginePayload applies the engine's cold-start payloads of
// 1,000 services, then the services' one again (a resync redeclaring
// every chain), in a network namespace each: with the tool, with Restore
// of the text, with Restore of the text typed by the engine's ops
// (RestoreOptions.Lines), and through the legacy xtables Runner's
// Restore of the typed input (in process, as the engine restores): iptables-legacy-save
// and the tables' bytes must not tell them apart.
func TestKernelEnginePayload(t *testing.T) {
	payloads := engineTypedPayloads(t, 1000)
	if len(payloads) == 0 {
		t.Fatal("the engine restored nothing")
	}
	typed := 0
	for _, p := range payloads {
		if len(p.Ops) > 0 {
			typed++
		}
	}
	if typed == 0 {
		t.Fatal("the engine typed none of its restores (RestoreInput.Ops)")
	}
	t.Logf("%d payloads, %d typed", len(payloads), typed)
	var want []string
	// round 0: every payload (the base chains' setup, -N and -I lines,
	// then the services); round 1: the services' payload again.
	rounds := [][]xtables.RestoreInput{payloads, payloads[len(payloads)-1:]}
	netnstest.InFreshNetns(t, func() {
		for _, round := range rounds {
			for _, p := range round {
				if err := toolRestore(p.Text); err != nil {
					t.Fatal(err)
				}
			}
			want = append(want, saveAll(t))
		}
	})
	for _, how := range []string{"text", "typed", "runner"} {
		netnstest.InFreshNetns(t, func() {
			var r xtables.Runner
			if how == "runner" {
				var err error
				if r, err = xtables.New(xtables.RunnerConfig{Backend: xtables.BackendLegacy}); err != nil {
					t.Fatal(err)
				}
				if !r.Capabilities().InProcess {
					t.Skip("the legacy Runner does not restore in process here")
				}
			}
			for round, ps := range rounds {
				for _, p := range ps {
					var err error
					switch how {
					case "text":
						err = xtblob.Restore(xtblob.IPv4, p.Text, xtblob.RestoreOptions{})
					case "typed":
						err = xtblob.Restore(xtblob.IPv4, p.Text, xtblob.RestoreOptions{Lines: linesOf(p.Ops)})
					default:
						// read back every write: Verify of the typed input too
						r.CheckNextRestore()
						err = r.Restore(context.Background(), p)
					}
					if err != nil {
						t.Fatalf("%s: %v", how, err)
					}
				}
				if got := saveAll(t); got != want[round] {
					t.Errorf("%s: round %d: iptables-legacy-save after Restore differs from after the tool (%d and %d bytes)", how, round, len(got), len(want[round]))
				}
			}
			if r != nil {
				if st := r.(xtables.InProcessRestorer).InProcessStats(); st.Unsupported+st.Refused+st.Partial != 0 || st.SelfCheckFailures != 0 || !st.Active || st.SelfChecks != 3 {
					t.Errorf("runner: %+v, want every restore in process and checked", st)
				}
			}
		})
	}
}

func cpuTime() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(children.Utime) + tv(children.Stime)
}

// BenchmarkKernelRestore applies the engine's cold-start payloads of n
// services to the empty tables of a fresh network namespace per op, with
// Restore and with iptables-legacy-restore --noflush: wall-s/op and
// cpu-s/op (this process and the tool together, kernel time included).
func BenchmarkKernelRestore(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		payloads := enginePayloads(b, n)
		size := 0
		for _, p := range payloads {
			size += len(p)
		}
		for _, how := range []string{"xtblob", "tool"} {
			b.Run(fmt.Sprintf("services=%d/%s", n, how), func(b *testing.B) {
				if os.Geteuid() != 0 {
					b.Skip("needs root")
				}
				b.SetBytes(int64(size))
				var wall, cpu time.Duration
				for b.Loop() {
					netnstest.InFreshNetns(b, func() {
						c0, t0 := cpuTime(), time.Now()
						for _, p := range payloads {
							if err := restoreBy(how, p); err != nil {
								b.Fatal(err)
							}
						}
						wall += time.Since(t0)
						cpu += cpuTime() - c0
					})
				}
				b.ReportMetric(wall.Seconds()/float64(b.N), "wall-s/op")
				b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
			})
		}
	}
}

// BenchmarkRestoreUserSpace is Restore's own work on the engine's
// cold-start payload (parse, encode, apply, lay out, write the blob),
// without the kernel's, encoding on one goroutine (workers=1) and on
// GOMAXPROCS (workers=0, Restore's default); input "text" is parsed from
// its text, "typed" read from the engine's ops where it typed them
// (RestoreOptions.Lines, as the xtables Runner's Restore hands them).
func BenchmarkRestoreUserSpace(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		payloads := engineTypedPayloads(b, n)
		for _, workers := range []int{1, 0} {
			for _, input := range []string{"text", "typed"} {
				b.Run(fmt.Sprintf("services=%d/workers=%d/input=%s", n, workers, input), func(b *testing.B) {
					c0 := cpuTime()
					for b.Loop() {
						for _, p := range payloads {
							lines := linesOf(p.Ops)
							if input == "text" {
								lines = nil
							}
							if _, err := xtblob.PlanForTest(xtblob.IPv4, p.Text, lines, workers); err != nil {
								b.Fatal(err)
							}
						}
					}
					b.ReportMetric((cpuTime()-c0).Seconds()/float64(b.N), "cpu-s/op")
				})
			}
		}
	}
}

// partialOf is a partial sync's input over payload: one service chain of
// its nat table redeclared (flushed) and its rules added again.
func partialOf(tb testing.TB, payload []byte) []byte {
	var chain string
	var rules []string
	for _, l := range strings.Split(string(payload), "\n") {
		if chain == "" && strings.HasPrefix(l, ":KUBE-SVC-") {
			chain = strings.Fields(l[1:])[0]
		}
		if chain != "" && strings.HasPrefix(l, "-A "+chain+" ") {
			rules = append(rules, l)
		}
	}
	if chain == "" || len(rules) == 0 {
		tb.Fatal("no service chain in the payload")
	}
	return []byte("*nat\n:" + chain + " - [0:0]\n" + strings.Join(rules, "\n") + "\nCOMMIT\n")
}

// BenchmarkKernelRestorePartial applies a partial sync's input (one
// service chain rewritten) over the tables the cold-start payload of n
// services left, with Restore and with the tool: each reads and replaces
// the whole nat table, as libiptc does.
func BenchmarkKernelRestorePartial(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		payloads := enginePayloads(b, n)
		partial := partialOf(b, payloads[len(payloads)-1])
		for _, how := range []string{"xtblob", "tool"} {
			b.Run(fmt.Sprintf("services=%d/%s", n, how), func(b *testing.B) {
				netnstest.InFreshNetns(b, func() {
					for _, p := range payloads {
						if err := xtblob.Restore(xtblob.IPv4, p, xtblob.RestoreOptions{}); err != nil {
							b.Fatal(err)
						}
					}
					var wall, cpu time.Duration
					for b.Loop() {
						c0, t0 := cpuTime(), time.Now()
						if err := restoreBy(how, partial); err != nil {
							b.Fatal(err)
						}
						wall += time.Since(t0)
						cpu += cpuTime() - c0
					}
					b.ReportMetric(wall.Seconds()/float64(b.N), "wall-s/op")
					b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
				})
			})
		}
	}
}

// BenchmarkParseTable parses the nat table the cold start of n services
// leaves (545,018 entries at 10,000), as every Restore over it does
// after reading it from the kernel.
func BenchmarkParseTable(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		payloads := enginePayloads(b, n)
		parse, err := xtblob.ParseTableForTest(xtblob.IPv4, payloads[len(payloads)-1], "nat")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			for b.Loop() {
				if err := parse(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// restoreBy applies an IPv4 payload with the tool (how "tool") or Restore.
func restoreBy(how string, payload []byte) error {
	if how == "tool" {
		return toolRestore(payload)
	}
	return xtblob.Restore(xtblob.IPv4, payload, xtblob.RestoreOptions{})
}
