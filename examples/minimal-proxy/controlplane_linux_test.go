package main

// A real etcd and kube-apiserver for the end-to-end test, started inside a
// network namespace the test made, and a client-go client that dials into
// that namespace from the test process.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// inNamespace runs fn on the calling goroutine's OS thread, switched into
// the test's node network namespace for the call. Sockets opened and
// processes started from fn live there. It must not hand fn to another
// goroutine (as netnstest.Exec does): startProcess ties its child's
// Pdeathsig to the thread that forks it and keeps that thread locked until
// the child exits, which only works on the caller's own thread.
type inNamespace func(fn func() error) error

// e2eBinaries are the paths hack/e2e/build.sh printed.
type e2eBinaries struct {
	etcd, kubeAPIServer string
}

// The control-plane versions the end-to-end tests run against: hack/e2e's
// two tools modules (kube-apiserver v1.34.4 with etcd v3.6.4, v1.37.2 with
// etcd v3.7.0).
const (
	e2eKube134 = "1.34"
	e2eKube137 = "1.37"
)

// e2eKubeFor is the kube-apiserver version a family's cluster runs: IPv4
// against v1.34 and IPv6 against v1.37, so that every mode's e2e passes
// against both ends of the supported window in one run of the tests, at
// the cost of one run (each mode already has one cluster per family).
// $SVCPROXY_E2E_KUBE=1.34 or 1.37 puts every cluster on that version.
func e2eKubeFor(family v1.IPFamily) string {
	if k := strings.TrimPrefix(os.Getenv("SVCPROXY_E2E_KUBE"), "v"); k != "" {
		return k
	}
	if family == v1.IPv6Protocol {
		return e2eKube137
	}
	return e2eKube134
}

// e2eBinariesEnv names the environment variables that hand a test
// prebuilt binaries of one version (run-e2e-ipvs.sh sets them in the qemu
// guest): SVCPROXY_E2E_ETCD_1_37 and SVCPROXY_E2E_KUBE_APISERVER_1_37 for
// v1.37. Without them, SVCPROXY_E2E_ETCD and SVCPROXY_E2E_KUBE_APISERVER
// serve every version.
func e2eBinariesEnv(kube string) (etcd, apiserver string) {
	suffix := "_" + strings.ReplaceAll(kube, ".", "_")
	etcd, apiserver = os.Getenv("SVCPROXY_E2E_ETCD"+suffix), os.Getenv("SVCPROXY_E2E_KUBE_APISERVER"+suffix)
	if etcd == "" || apiserver == "" {
		etcd, apiserver = os.Getenv("SVCPROXY_E2E_ETCD"), os.Getenv("SVCPROXY_E2E_KUBE_APISERVER")
	}
	return etcd, apiserver
}

// buildE2EBinaries runs hack/e2e/build.sh --kube kube (instant when its
// cache holds the binaries) and skips the test, with the reason, when they
// cannot be built in the time the test has left (no module proxy, no
// disk, …), or with -short (hack/clientlibs.sh's unit-test run).
func buildE2EBinaries(t *testing.T, kube string) e2eBinaries {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping the end-to-end test in -short mode")
	}
	if etcd, apiserver := e2eBinariesEnv(kube); etcd != "" && apiserver != "" {
		t.Logf("control plane (kube-apiserver %s): %s", kube, apiserver)
		return e2eBinaries{etcd: etcd, kubeAPIServer: apiserver}
	}
	budget := 25 * time.Minute
	if d, ok := t.Deadline(); ok {
		if left := time.Until(d) - 5*time.Minute; left < budget {
			budget = left
		}
	}
	if budget <= 0 {
		t.Skip("skipping: not enough test time left to build etcd and kube-apiserver; run hack/e2e/build.sh first")
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	script, err := filepath.Abs("../../hack/e2e/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script, "--kube", kube)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Skipf("skipping: cannot build etcd and kube-apiserver %s with hack/e2e/build.sh (%v; within %v):\n%s", kube, err, budget.Round(time.Second), tail(stderr.String(), 20))
	}
	var bins e2eBinaries
	for _, line := range strings.Split(stdout.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "ETCD="); ok {
			bins.etcd = v
		}
		if v, ok := strings.CutPrefix(line, "KUBE_APISERVER="); ok {
			bins.kubeAPIServer = v
		}
	}
	if bins.etcd == "" || bins.kubeAPIServer == "" {
		t.Fatalf("hack/e2e/build.sh printed no binary paths:\n%s", stdout.String())
	}
	// The cache directory names the versions.
	t.Logf("control plane (kube-apiserver %s): %s", kube, bins.kubeAPIServer)
	return bins
}

// controlPlane is a running etcd + kube-apiserver.
type controlPlane struct {
	// URL is the API server's address as seen from inside the namespace.
	URL string
	// Kubeconfig is a kubeconfig file for URL with a system:masters token.
	Kubeconfig string
	// Client talks to the API server through the namespace.
	Client kubernetes.Interface
	// Config is the rest config behind Client.
	Config *rest.Config
}

const (
	e2eToken            = "svcproxy-e2e-admin-token"
	e2eAPIServerAddress = "127.0.0.1"
	e2eAPIServerPort    = "6443"
)

// startControlPlane starts etcd and kube-apiserver inside the namespace of
// inNS, listening on its loopback only, and waits (bounded) until the API
// server is ready. Both are stopped in t.Cleanup.
func startControlPlane(t *testing.T, bins e2eBinaries, inNS inNamespace, serviceCIDR string) *controlPlane {
	t.Helper()
	return startPreparedControlPlane(t, prepareControlPlane(t), bins, inNS, serviceCIDR)
}

// controlPlaneFiles are what a control plane needs before it starts: its
// directory, PKI and an admin kubeconfig (usable before the API server
// runs, to test a proxy started first).
type controlPlaneFiles struct {
	dir, url, kubeconfig string
	pki                  pkiFiles
}

func prepareControlPlane(t *testing.T) *controlPlaneFiles {
	t.Helper()
	dir := t.TempDir()
	pki := writePKI(t, dir)
	url := "https://" + net.JoinHostPort(e2eAPIServerAddress, e2eAPIServerPort)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
`, url, pki.caCert, e2eToken)), 0o600); err != nil {
		t.Fatal(err)
	}

	return &controlPlaneFiles{dir: dir, url: url, kubeconfig: kubeconfig, pki: pki}
}

// startPreparedControlPlane is startControlPlane with files made beforehand.
func startPreparedControlPlane(t *testing.T, files *controlPlaneFiles, bins e2eBinaries, inNS inNamespace, serviceCIDR string) *controlPlane {
	t.Helper()
	dir, pki := files.dir, files.pki

	etcdLog := filepath.Join(dir, "etcd.log")
	startProcess(t, inNS, "etcd", etcdLog, bins.etcd,
		"--name=e2e",
		"--data-dir="+filepath.Join(dir, "etcd-data"),
		"--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=e2e=http://127.0.0.1:2380",
		"--unsafe-no-fsync",
		"--log-level=warn",
	)

	apiLog := filepath.Join(dir, "kube-apiserver.log")
	apiserver := startProcess(t, inNS, "kube-apiserver", apiLog, bins.kubeAPIServer,
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address="+e2eAPIServerAddress,
		"--advertise-address="+e2eAPIServerAddress,
		"--secure-port="+e2eAPIServerPort,
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file="+pki.servingCert,
		"--tls-private-key-file="+pki.servingKey,
		"--token-auth-file="+pki.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-key-file="+pki.saPublicKey,
		"--service-account-signing-key-file="+pki.saPrivateKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range="+serviceCIDR,
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=1",
	)

	url, kubeconfig := files.url, files.kubeconfig
	caPEM, err := os.ReadFile(pki.caCert)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{
		Host:            url,
		BearerToken:     e2eToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		Timeout:         10 * time.Second,
		QPS:             100,
		Burst:           200,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			var conn net.Conn
			err := inNS(func() error {
				var err error
				conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, address)
				return err
			})
			return conn, err
		},
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// Ready when /readyz answers ok; bounded, and cut short if the process dies.
	deadline := time.Now().Add(apiServerReadyTimeout)
	var lastErr error
	for {
		if apiserver.exited() {
			t.Fatalf("kube-apiserver exited while starting:\n%s", tail(readFile(apiLog), 40))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil && string(body) == "ok" {
			break
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after %v (last error: %v):\n%s\netcd:\n%s", apiServerReadyTimeout, lastErr, tail(readFile(apiLog), 40), tail(readFile(etcdLog), 20))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("kube-apiserver ready at %s (in the node namespace)", url)
	return &controlPlane{URL: url, Kubeconfig: kubeconfig, Client: client, Config: cfg}
}

// process is a child started by startProcess.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to d for the process to exit and reports whether it did.
func (p *process) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// startProcess starts a child inside the namespace with its output in
// logPath. t.Cleanup sends SIGTERM, waits up to 10s, then kills it.
func startProcess(t *testing.T, inNS inNamespace, name, logPath, path string, args ...string) *process {
	t.Helper()
	p, err := launchProcess(inNS, logPath, path, args...)
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	cmd := p.cmd
	t.Cleanup(func() {
		if t.Failed() {
			// Whether the child was still there when the test failed, and
			// if not how it ended (a signal says who could have sent it).
			if p.exited() {
				t.Logf("%s (pid %d) had exited: %v", name, cmd.Process.Pid, p.err)
			} else {
				t.Logf("%s (pid %d) was still running", name, cmd.Process.Pid)
			}
		}
		if p.exited() {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if !p.wait(10 * time.Second) {
			_ = cmd.Process.Kill()
			p.wait(10 * time.Second)
		}
	})
	return p
}

// launchProcess starts path inside the namespace of inNS with its output
// in logPath; the process's done channel closes when it exits.
func launchProcess(inNS inNamespace, logPath, path string, args ...string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, and killed if the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the OS thread that forked the child ends,
		// not the process. Go ends a thread when a goroutine exits locked
		// to it, which this package's code does on purpose (diff's scratch
		// namespace for nft, a namespace it cannot leave): had the fork's
		// thread gone back to the scheduler, such a goroutine could later
		// take it and end it, and the child would be killed without a
		// word in its log (an e2e proxy was once seen to vanish so). The
		// thread stays locked to this goroutine until the child exits.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// The child inherits the namespace of the OS thread that forks it;
		// inNS locks this same thread again and puts it back after. An
		// inNS that forked on a thread of its own would leave the child's
		// Pdeathsig to whatever that thread runs next. The e2e cluster's
		// inNS was netnstest.Exec, which does: CI runs where a cluster's
		// kube-apiserver and proxy stopped answering at the same moment,
		// nothing in their logs, fit that. Refuse such an inNS instead.
		tid := syscall.Gettid()
		if err := inNS(func() error {
			if got := syscall.Gettid(); got != tid {
				return fmt.Errorf("inNamespace ran fn on OS thread %d, not the caller's %d: the child's Pdeathsig would hang on a thread this test does not hold", got, tid)
			}
			return cmd.Start()
		}); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		logFile.Close()
		return nil, err
	}
	return p, nil
}

// pkiFiles are the files writePKI made.
type pkiFiles struct {
	caCert, servingCert, servingKey string
	saPublicKey, saPrivateKey       string
	tokenFile                       string
}

// writePKI writes a CA, a serving certificate for the API server's address
// signed by it, a service-account key pair and a token file whose one user
// is in system:masters.
func writePKI(t *testing.T, dir string) pkiFiles {
	t.Helper()
	f := pkiFiles{
		caCert:       filepath.Join(dir, "ca.crt"),
		servingCert:  filepath.Join(dir, "apiserver.crt"),
		servingKey:   filepath.Join(dir, "apiserver.key"),
		saPublicKey:  filepath.Join(dir, "sa.pub"),
		saPrivateKey: filepath.Join(dir, "sa.key"),
		tokenFile:    filepath.Join(dir, "tokens.csv"),
	}
	now := time.Now()
	caKey := newKey(t)
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "svcproxy-e2e-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	servingKey := newKey(t)
	servingDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP(e2eAPIServerAddress), net.ParseIP("10.95.0.1"), net.ParseIP("fd00:95::1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}, ca, &servingKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	saKey := newKey(t)
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, f.caCert, "CERTIFICATE", caDER)
	writePEM(t, f.servingCert, "CERTIFICATE", servingDER)
	writePEM(t, f.servingKey, "EC PRIVATE KEY", marshalKey(t, servingKey))
	writePEM(t, f.saPublicKey, "PUBLIC KEY", saPub)
	writePEM(t, f.saPrivateKey, "EC PRIVATE KEY", marshalKey(t, saKey))
	if err := os.WriteFile(f.tokenFile, []byte(e2eToken+`,e2e-admin,e2e-admin-uid,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func marshalKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t *testing.T, path, blockType string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(b)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
