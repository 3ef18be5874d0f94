// Command controller runs cert-manager's own controllers for the local cluster's tests of
// spec.tls.<part>.issuerRef: the Go module proxy serves cert-manager's root module
// (github.com/cert-manager/cert-manager), where every controller lives and registers itself, but
// not its cmd/controller submodule. This is the part of that main package the tests need.
//
// Run: issuers and clusterissuers, the CertificateRequest approver and the CA and SelfSigned
// signers, and the Certificate controllers (trigger, key manager, request manager, issuing,
// readiness, revision manager). Not run: ACME, Vault and Venafi issuers, the ingress and gateway
// shims, CertificateSigningRequest signers, metrics, leader election; the webhook and cainjector
// are other programs (the CRDs' schemas still validate).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"k8s.io/klog/v2"

	// The issuer kinds the issuers controllers set up.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	approver.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	issuing.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	namespace := flag.String("namespace", "", "the one namespace to watch (default all; then no ClusterIssuers)")
	clusterResources := flag.String("cluster-resource-namespace", "kube-system", "where ClusterIssuers' Secrets are")
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	logf.InitLogs()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx = logf.NewContext(ctx, klog.Background(), "cert-manager")
	log := logf.FromContext(ctx)

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         *kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          *namespace,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: *clusterResources},
		CertificateOptions: controllerpkg.CertificateOptions{
			// cert-manager's defaults for a failed request: retried after an hour, at most a day and a third.
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager:", err)
		os.Exit(1)
	}

	var running sync.WaitGroup
	known := controllerpkg.Known()
	for _, name := range controllers {
		if name == clusterissuers.ControllerName && *namespace != "" {
			continue
		}
		controller, err := known[name](factory)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cert-manager: %s: %v\n", name, err)
			os.Exit(1)
		}
		running.Add(1)
		go func(name string) {
			defer running.Done()
			log.Info("starting controller", "controller", name)
			if err := controller.Run(5, ctx); err != nil {
				log.Error(err, "controller stopped", "controller", name)
				cancel()
			}
		}(name)
	}
	// Every context the factory built shares these informers: start them once all controllers
	// have registered theirs.
	shared, err := factory.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager:", err)
		os.Exit(1)
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	log.Info("controllers started", "controllers", strings.Join(controllers, ","))
	running.Wait()
}
