package agent

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
)

// IPAM allocates pod IPs from the node's pod CIDR and persists allocations
// (ip -> owner, usually the pod UID) in a JSON file. Like host-local IPAM it
// hands out addresses round-robin (after the last one allocated), so that a
// just-released IP is not immediately reused while peers may still cache its
// old MAC address.
type IPAM struct {
	mu    sync.Mutex
	path  string
	cidr  *net.IPNet
	alloc map[string]string
	last  string
}

type ipamFile struct {
	Last        string            `json:"last,omitempty"`
	Allocations map[string]string `json:"allocations"`
}

// NewIPAM loads (or creates) the allocation file.
func NewIPAM(path, cidr string) (*IPAM, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, err
	}
	if n.IP.To4() == nil {
		return nil, fmt.Errorf("only IPv4 pod CIDRs are supported: %s", cidr)
	}
	a := &IPAM{path: path, cidr: n, alloc: map[string]string{}}
	if path != "" {
		if data, err := os.ReadFile(path); err == nil {
			var f ipamFile
			if err := json.Unmarshal(data, &f); err != nil {
				return nil, fmt.Errorf("ipam file %s: %w", path, err)
			}
			if f.Allocations != nil {
				a.alloc = f.Allocations
			} else {
				// early format: a plain ip -> owner map
				var m map[string]string
				if json.Unmarshal(data, &m) == nil && m != nil {
					delete(m, "last")
					a.alloc = m
				}
			}
			a.last = f.Last
		}
	}
	return a, nil
}

func (a *IPAM) save() error {
	if a.path == "" {
		return nil
	}
	data, _ := json.MarshalIndent(ipamFile{Last: a.last, Allocations: a.alloc}, "", "  ")
	tmp := a.path + ".tmp"
	if err := os.MkdirAll(filepath.Dir(a.path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, a.path)
}

// Allocate returns the IP owned by owner, allocating the lowest free one if needed.
// The network address, the .1 (gateway-style) address and broadcast are never used.
func (a *IPAM) Allocate(owner string) (net.IP, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ip, o := range a.alloc {
		if o == owner {
			return net.ParseIP(ip).To4(), nil
		}
	}
	base := binary.BigEndian.Uint32(a.cidr.IP.To4())
	ones, bits := a.cidr.Mask.Size()
	size := uint32(1) << uint(bits-ones)
	if size < 4 {
		return nil, fmt.Errorf("pod CIDR %s is too small", a.cidr)
	}
	first, n := uint32(2), size-3 // usable offsets: 2 .. size-2
	start := uint32(0)
	if l := net.ParseIP(a.last).To4(); l != nil && a.cidr.Contains(l) {
		if off := binary.BigEndian.Uint32(l) - base; off >= first && off < first+n {
			start = off - first + 1
		}
	}
	for i := uint32(0); i < n; i++ {
		off := first + (start+i)%n
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, base+off)
		if _, used := a.alloc[ip.String()]; used {
			continue
		}
		a.alloc[ip.String()] = owner
		prevLast := a.last
		a.last = ip.String()
		if err := a.save(); err != nil {
			delete(a.alloc, ip.String())
			a.last = prevLast
			return nil, err
		}
		return ip, nil
	}
	return nil, fmt.Errorf("pod CIDR %s exhausted", a.cidr)
}

// Release frees every IP held by owner.
func (a *IPAM) Release(owner string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	changed := false
	for ip, o := range a.alloc {
		if o == owner {
			delete(a.alloc, ip)
			changed = true
		}
	}
	if changed {
		return a.save()
	}
	return nil
}

// Owners lists the owners currently holding IPs.
func (a *IPAM) Owners() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]string{}
	for ip, o := range a.alloc {
		out[o] = ip
	}
	return out
}
