package agent

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// NetNSName is the network namespace name of a pod.
func NetNSName(uid string) string {
	u := strings.ReplaceAll(uid, "-", "")
	if len(u) > 12 {
		u = u[:12]
	}
	return "qk-" + u
}

// HostVethName is the host-side veth name of a pod (qkh + 10 hex chars).
func HostVethName(uid string) string {
	u := strings.ReplaceAll(uid, "-", "")
	if len(u) > 10 {
		u = u[:10]
	}
	return "qkh" + u
}

// EnsureBridge creates the bridge with gateway/16 if it does not exist.
func EnsureBridge(bridge, gateway string) error {
	if _, err := run("ip", "link", "show", "dev", bridge); err != nil {
		if out, err := run("ip", "link", "add", bridge, "type", "bridge"); err != nil && !strings.Contains(out, "File exists") {
			return err
		}
	}
	out, _ := run("ip", "-4", "addr", "show", "dev", bridge)
	if !strings.Contains(out, "inet "+gateway+"/") {
		if out, err := run("ip", "addr", "add", gateway+"/16", "dev", bridge); err != nil && !strings.Contains(out, "File exists") && !strings.Contains(out, "already assigned") {
			return err
		}
	}
	_, err := run("ip", "link", "set", bridge, "up")
	return err
}

// SetupPodNetwork creates the netns + veth and configures the pod IP.
func SetupPodNetwork(netns, hostVeth, bridge, podIP, gateway string) error {
	TeardownPodNetwork(netns, hostVeth)
	if _, err := run("ip", "netns", "add", netns); err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "link", "add", hostVeth, "type", "veth", "peer", "name", "eth0", "netns", netns},
		{"ip", "link", "set", hostVeth, "master", bridge},
		// hairpin: with br_netfilter, a pod's packet to a Service address that kube-proxy
		// sends back to the same pod leaves through the port it came in on; without it a
		// pod cannot reach itself through its own Service (kubelet's hairpin-veth mode)
		{"ip", "link", "set", hostVeth, "type", "bridge_slave", "hairpin", "on"},
		{"ip", "link", "set", hostVeth, "up"},
		{"ip", "-n", netns, "link", "set", "lo", "up"},
		{"ip", "-n", netns, "addr", "add", podIP + "/16", "dev", "eth0"},
		// gratuitous ARP when eth0 comes up: the host and other pods may still
		// cache the MAC of an earlier pod that had this IP
		{"ip", "netns", "exec", netns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/eth0/arp_notify"},
		{"ip", "-n", netns, "link", "set", "eth0", "up"},
		{"ip", "-n", netns, "route", "add", "default", "via", gateway},
	}
	for _, s := range steps {
		if _, err := run(s[0], s[1:]...); err != nil {
			TeardownPodNetwork(netns, hostVeth)
			return err
		}
	}
	return nil
}

// TeardownPodNetwork removes the netns and the veth; errors are ignored (idempotent).
func TeardownPodNetwork(netns, hostVeth string) {
	if hostVeth != "" {
		if _, err := os.Stat("/sys/class/net/" + hostVeth); err == nil {
			_, _ = run("ip", "link", "del", hostVeth)
		}
	}
	if netns != "" {
		if _, err := os.Stat("/run/netns/" + netns); err == nil {
			_, _ = run("ip", "netns", "del", netns)
		}
	}
}
