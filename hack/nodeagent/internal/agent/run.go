package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// klogFilter drops the endless "cannot list secrets/configmaps" errors of
// virtual-kubelet's cluster-wide Secret/ConfigMap informers: the Node
// authorizer (rightly) forbids a node to list them, and the agent reads the
// objects it needs with GETs instead.
type klogFilter struct{}

func (klogFilter) Write(b []byte) (int, error) {
	s := string(b)
	if strings.Contains(s, "forbidden") && (strings.Contains(s, "*v1.Secret") || strings.Contains(s, "*v1.ConfigMap")) {
		return len(b), nil
	}
	return os.Stderr.Write(b)
}

// selfSignedCert makes an in-memory serving certificate for the kubelet API.
func selfSignedCert(nodeName string, ip net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: nodeName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(5 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{nodeName, "localhost"},
		IPAddresses:  []net.IP{ip, net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// RunMain implements `nodeagent run`.
func RunMain(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var cfg Config
	var kubeconfig string
	fs.StringVar(&cfg.NodeName, "node-name", "node-1", "Kubernetes node name")
	fs.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the agent")
	fs.StringVar(&cfg.PodCIDR, "pod-cidr", "10.213.1.0/24", "pod CIDR of this node")
	fs.StringVar(&cfg.Bridge, "bridge", "qk0", "host bridge the pod veths are attached to")
	fs.StringVar(&cfg.Gateway, "gateway", "10.213.0.1", "bridge address, default route of the pods")
	fs.StringVar(&cfg.DNSServer, "dns-server", "10.213.0.1", "nameserver written to the pods' resolv.conf")
	fs.StringVar(&cfg.ClusterDomain, "cluster-domain", "cluster.local", "cluster DNS domain")
	fs.StringVar(&cfg.ImageMap, "image-map", "/var/lib/quorumkeeper/images.yaml", "image map YAML")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "state directory (default /var/lib/quorumkeeper/nodes/<node-name>)")
	fs.StringVar(&cfg.ListenAddress, "listen-address", "127.0.0.1:10250", "kubelet API (logs/exec) listen address")
	fs.StringVar(&cfg.HostIP, "host-ip", "127.0.0.1", "node InternalIP (also hostIP of pods)")
	fs.StringVar(&cfg.KubernetesServiceHost, "kubernetes-service-host", "10.214.0.1", "KUBERNETES_SERVICE_HOST for containers")
	fs.IntVar(&cfg.KubernetesServicePort, "kubernetes-service-port", 443, "KUBERNETES_SERVICE_PORT for containers")
	fs.StringVar(&cfg.CPU, "cpu", "4", "node cpu capacity")
	fs.StringVar(&cfg.Memory, "memory", "8Gi", "node memory capacity")
	fs.IntVar(&cfg.MaxPods, "max-pods", 110, "node pod capacity")
	fs.DurationVar(&cfg.BackoffBase, "restart-backoff-base", time.Second, "first crash-loop back-off (kubelet: 10s)")
	fs.DurationVar(&cfg.BackoffMax, "restart-backoff-max", 30*time.Second, "maximum crash-loop back-off (kubelet: 5m)")
	fs.BoolVar(&cfg.KillPodsOnExit, "kill-pods-on-exit", false, "kill all pods when the agent exits (default: leave them running like kubelet)")
	_ = fs.Parse(args)
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	_ = kfs.Set("logtostderr", "false")
	_ = kfs.Set("alsologtostderr", "false")
	_ = kfs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(klogFilter{})
	if cfg.StateDir == "" {
		cfg.StateDir = "/var/lib/quorumkeeper/nodes/" + cfg.NodeName
	}
	for _, q := range []string{cfg.CPU, cfg.Memory} {
		if _, err := resource.ParseQuantity(q); err != nil {
			return fmt.Errorf("bad quantity %q: %w", q, err)
		}
	}
	host, portStr, err := net.SplitHostPort(cfg.ListenAddress)
	if err != nil {
		return err
	}
	port, _ := strconv.Atoi(portStr)
	_ = host

	// One agent per node: a second one (e.g. started by a supervisor that
	// lost track of the first) must not touch the first one's containers.
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(cfg.StateDir, "agent.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("another node agent already runs with state dir %s: %w", cfg.StateDir, err)
	}

	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	restCfg.QPS, restCfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	if err := EnsureBridge(cfg.Bridge, cfg.Gateway); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	prov, err := NewProvider(cfg, client)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	for i := 0; ; i++ {
		err := prov.CleanupLeftovers(ctx)
		if err == nil {
			break
		}
		prov.logf("cleanup of leftovers: %v (retrying)", err)
		if i > 60 || ctx.Err() != nil {
			return err
		}
		time.Sleep(2 * time.Second)
	}
	cert, err := selfSignedCert(cfg.NodeName, net.ParseIP(cfg.HostIP))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	nodeReady := make(chan struct{})
	newProvider := func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		n := pc.Node
		go func() {
			<-nodeReady
			prov.GCLoop(ctx, pc.Pods)
		}()
		n.Labels = map[string]string{
			"kubernetes.io/hostname":           cfg.NodeName,
			"kubernetes.io/os":                 "linux",
			"kubernetes.io/arch":               "amd64",
			"node.kubernetes.io/instance-type": "qk-process",
			"type":                             "qk-process",
		}
		n.Spec.PodCIDR = cfg.PodCIDR
		n.Spec.PodCIDRs = []string{cfg.PodCIDR}
		alloc := prov.allocatable()
		n.Status.Capacity = alloc
		n.Status.Allocatable = alloc
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: cfg.HostIP}}
		n.Status.DaemonEndpoints = corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}}
		n.Status.NodeInfo = corev1.NodeSystemInfo{
			OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "v1.35.4-qk",
			ContainerRuntimeVersion: "qk-process://1", OSImage: "quorumkeeper node agent",
		}
		return prov, nil, nil
	}
	nd, err := nodeutil.NewNode(cfg.NodeName, newProvider,
		nodeutil.WithClient(client),
		func(c *nodeutil.NodeConfig) error {
			c.HTTPListenAddr = cfg.ListenAddress
			c.Handler = mux
			c.SkipDownwardAPIResolution = true
			c.NumWorkers = 4
			c.InformerResyncPeriod = time.Minute
			c.StreamIdleTimeout = 4 * time.Hour
			c.StreamCreationTimeout = 30 * time.Second
			return nil
		},
		nodeutil.AttachProviderRoutes(mux),
		nodeutil.WithTLSConfig(func(t *tls.Config) error {
			t.Certificates = []tls.Certificate{cert}
			t.ClientAuth = tls.NoClientCert
			return nil
		}),
	)
	if err != nil {
		return err
	}
	prov.logf("node agent %s starting (state %s, pod CIDR %s, listen %s)", cfg.NodeName, cfg.StateDir, cfg.PodCIDR, cfg.ListenAddress)
	go func() {
		if err := nd.WaitReady(ctx, 0); err == nil {
			prov.logf("node %s ready", cfg.NodeName)
			close(nodeReady)
		}
	}()
	err = nd.Run(ctx)
	if cfg.KillPodsOnExit {
		prov.logf("killing all pods (--kill-pods-on-exit)")
		prov.KillAll()
	}
	prov.logf("node agent %s stopped: %v (pods left running)", cfg.NodeName, err)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
