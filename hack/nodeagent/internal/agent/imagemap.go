package agent

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"
)

// ImageEntry is one entry of the image map file.
type ImageEntry struct {
	Image      string            `json:"image"`
	Binds      map[string]string `json:"binds,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
}

// ImageMap is the parsed image map file.
type ImageMap struct {
	Images []ImageEntry `json:"images"`
}

// ParseImageMap parses the YAML image map.
func ParseImageMap(data []byte) (*ImageMap, error) {
	m := &ImageMap{}
	if err := yaml.Unmarshal(data, m); err != nil {
		return nil, err
	}
	for i, e := range m.Images {
		if e.Image == "" {
			return nil, fmt.Errorf("image map entry %d has no image", i)
		}
		for dst := range e.Binds {
			if !strings.HasPrefix(dst, "/") {
				return nil, fmt.Errorf("image %s: bind target %q is not absolute", e.Image, dst)
			}
		}
	}
	return m, nil
}

// splitRepoTag splits "repo:tag" (a registry port like host:5000/x is not a tag).
// Digests ("@sha256:...") are kept as part of the tag for exact matching.
func splitRepoTag(ref string) (repo, tag string) {
	if i := strings.Index(ref, "@"); i >= 0 {
		return ref[:i], ref[i:]
	}
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon > slash {
		return ref[:colon], ref[colon+1:]
	}
	return ref, ""
}

// Lookup finds the entry for an image reference: an exact match wins, then
// "repo:*" matches any tag of repo. An image without a tag is treated as ":latest".
func (m *ImageMap) Lookup(image string) (*ImageEntry, bool) {
	if m == nil {
		return nil, false
	}
	repo, tag := splitRepoTag(image)
	full := image
	if tag == "" {
		full = repo + ":latest"
	}
	for i := range m.Images {
		if m.Images[i].Image == image || m.Images[i].Image == full {
			return &m.Images[i], true
		}
	}
	for i := range m.Images {
		e := m.Images[i].Image
		if strings.HasSuffix(e, ":*") && strings.TrimSuffix(e, ":*") == repo {
			return &m.Images[i], true
		}
	}
	return nil, false
}

// SortedBinds returns bind targets sorted so that parents are mounted before children.
func (e *ImageEntry) SortedBinds() [][2]string {
	out := make([][2]string, 0, len(e.Binds))
	for dst, src := range e.Binds {
		out = append(out, [2]string{src, dst})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][1] < out[j][1] })
	return out
}

// ImageMapFile re-reads the image map file when it changes (mtime/size).
type ImageMapFile struct {
	Path  string
	mu    sync.Mutex
	mtime time.Time
	size  int64
	m     *ImageMap
	err   error
}

// Get returns the current map, re-reading the file if it changed.
func (f *ImageMapFile) Get() (*ImageMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Path == "" {
		return &ImageMap{}, nil
	}
	st, err := os.Stat(f.Path)
	if err != nil {
		return nil, fmt.Errorf("image map %s: %w", f.Path, err)
	}
	if f.m != nil && st.ModTime().Equal(f.mtime) && st.Size() == f.size {
		return f.m, f.err
	}
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, fmt.Errorf("image map %s: %w", f.Path, err)
	}
	m, perr := ParseImageMap(data)
	f.mtime, f.size = st.ModTime(), st.Size()
	if perr != nil {
		f.m, f.err = &ImageMap{}, fmt.Errorf("image map %s: %w", f.Path, perr)
	} else {
		f.m, f.err = m, nil
	}
	return f.m, f.err
}
