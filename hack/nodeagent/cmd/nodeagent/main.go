// Command nodeagent is the quorumkeeper node agent: a virtual-kubelet
// provider that runs pods as host processes (run), a local-path PV
// provisioner (provision) and the in-container init helper (init).
package main

import (
	"fmt"
	"os"

	"quorumkeeper.dev/nodeagent/internal/agent"
	"quorumkeeper.dev/nodeagent/internal/initproc"
	"quorumkeeper.dev/nodeagent/internal/provisioner"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: nodeagent run|provision|init [flags]  (nodeagent <cmd> -h for flags)")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = agent.RunMain(os.Args[2:])
	case "provision":
		err = provisioner.Main(os.Args[2:])
	case "init":
		initproc.Main(os.Args[2:]) // never returns
	case "-h", "--help", "help":
		usage()
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeagent:", err)
		os.Exit(1)
	}
}
