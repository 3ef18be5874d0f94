// Command coredns is CoreDNS, pinned by this module's go.mod, with only the plugins the local
// cluster's Corefile uses (hack/cluster/localcluster.py, COREFILE) and log for a look at the
// queries. CoreDNS's own main imports every plugin, among them the AWS, Azure and Google Cloud
// SDKs and Datadog's tracer: most of what a cold build compiled. The directives keep their
// upstream order (dnsserver.Directives); a Corefile naming a plugin left out fails to parse.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() {
	coremain.Run()
}
