package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"quorumkeeper.dev/nodeagent/internal/initproc"
)

type fileData struct {
	data []byte
	mode os.FileMode
}

type tokenCache struct {
	token   string
	issued  time.Time
	expires time.Time
}

// volumeError carries a container Waiting reason.
type volumeError struct {
	reason string
	err    error
}

func (e *volumeError) Error() string { return e.err.Error() }

func modeOr(m *int32, def os.FileMode) os.FileMode {
	if m != nil {
		return os.FileMode(*m) & 0o777
	}
	return def
}

// writeFileSet makes dir contain exactly the given files (relative paths).
func writeFileSet(dir string, files map[string]fileData) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for rel, fd := range files {
		p := filepath.Join(dir, filepath.Clean("/"+rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if old, err := os.ReadFile(p); err == nil && string(old) == string(fd.data) {
			_ = os.Chmod(p, fd.mode)
			continue
		}
		tmp := filepath.Join(filepath.Dir(p), ".tmp-"+filepath.Base(p))
		if err := os.WriteFile(tmp, fd.data, fd.mode); err != nil {
			return err
		}
		_ = os.Chmod(tmp, fd.mode)
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
	}
	// remove stale files
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if _, ok := files[rel]; !ok {
			os.Remove(p)
		}
		return nil
	})
	return nil
}

// volumeFiles computes the content of a secret/configMap/downwardAPI/projected volume.
func (pr *podRuntime) volumeFiles(ctx context.Context, v *corev1.Volume) (map[string]fileData, error) {
	pod := pr.getPod()
	files := map[string]fileData{}
	ns := pod.Namespace
	addCM := func(name string, items []corev1.KeyToPath, def os.FileMode, optional bool) error {
		cm, err := pr.p.GetConfigMap(ctx, ns, name)
		if err != nil {
			if optional {
				return nil
			}
			return fmt.Errorf("configmap %q: %w", name, err)
		}
		all := map[string][]byte{}
		for k, val := range cm.Data {
			all[k] = []byte(val)
		}
		for k, val := range cm.BinaryData {
			all[k] = val
		}
		if len(items) == 0 {
			for k, val := range all {
				files[k] = fileData{val, def}
			}
			return nil
		}
		for _, it := range items {
			val, ok := all[it.Key]
			if !ok {
				if optional {
					continue
				}
				return fmt.Errorf("configmap %q has no key %q", name, it.Key)
			}
			files[it.Path] = fileData{val, modeOr(it.Mode, def)}
		}
		return nil
	}
	addSecret := func(name string, items []corev1.KeyToPath, def os.FileMode, optional bool) error {
		s, err := pr.p.GetSecret(ctx, ns, name)
		if err != nil {
			if optional {
				return nil
			}
			return fmt.Errorf("secret %q: %w", name, err)
		}
		if len(items) == 0 {
			for k, val := range s.Data {
				files[k] = fileData{val, def}
			}
			return nil
		}
		for _, it := range items {
			val, ok := s.Data[it.Key]
			if !ok {
				if optional {
					continue
				}
				return fmt.Errorf("secret %q has no key %q", name, it.Key)
			}
			files[it.Path] = fileData{val, modeOr(it.Mode, def)}
		}
		return nil
	}
	addDownward := func(items []corev1.DownwardAPIVolumeFile, def os.FileMode) error {
		for _, it := range items {
			var val string
			var err error
			switch {
			case it.FieldRef != nil:
				val, err = PodFieldValue(pod, pr.podIP(), pr.p.cfg.HostIP, it.FieldRef.FieldPath)
			case it.ResourceFieldRef != nil:
				c := findContainer(pod, it.ResourceFieldRef.ContainerName)
				if c == nil {
					err = fmt.Errorf("container %q not found", it.ResourceFieldRef.ContainerName)
				} else {
					val, err = ResourceFieldValue(c, it.ResourceFieldRef, pr.p.allocatable())
				}
			}
			if err != nil {
				return err
			}
			files[it.Path] = fileData{[]byte(val), modeOr(it.Mode, def)}
		}
		return nil
	}
	switch {
	case v.ConfigMap != nil:
		return files, addCM(v.ConfigMap.Name, v.ConfigMap.Items, modeOr(v.ConfigMap.DefaultMode, 0o644), v.ConfigMap.Optional != nil && *v.ConfigMap.Optional)
	case v.Secret != nil:
		return files, addSecret(v.Secret.SecretName, v.Secret.Items, modeOr(v.Secret.DefaultMode, 0o644), v.Secret.Optional != nil && *v.Secret.Optional)
	case v.DownwardAPI != nil:
		return files, addDownward(v.DownwardAPI.Items, modeOr(v.DownwardAPI.DefaultMode, 0o644))
	case v.Projected != nil:
		def := modeOr(v.Projected.DefaultMode, 0o644)
		for i, src := range v.Projected.Sources {
			var err error
			switch {
			case src.ConfigMap != nil:
				err = addCM(src.ConfigMap.Name, src.ConfigMap.Items, def, src.ConfigMap.Optional != nil && *src.ConfigMap.Optional)
			case src.Secret != nil:
				err = addSecret(src.Secret.Name, src.Secret.Items, def, src.Secret.Optional != nil && *src.Secret.Optional)
			case src.DownwardAPI != nil:
				err = addDownward(src.DownwardAPI.Items, def)
			case src.ServiceAccountToken != nil:
				var tok string
				tok, err = pr.serviceAccountToken(ctx, fmt.Sprintf("%s/%d", v.Name, i), src.ServiceAccountToken)
				if err == nil {
					mode := def
					files[src.ServiceAccountToken.Path] = fileData{[]byte(tok), mode}
				}
			}
			if err != nil {
				return nil, err
			}
		}
		return files, nil
	}
	return nil, fmt.Errorf("unsupported volume type")
}

func (pr *podRuntime) serviceAccountToken(ctx context.Context, key string, src *corev1.ServiceAccountTokenProjection) (string, error) {
	pr.mu.Lock()
	tc := pr.tokens[key]
	pr.mu.Unlock()
	now := time.Now()
	if tc != nil && now.Before(tc.issued.Add(time.Duration(float64(tc.expires.Sub(tc.issued))*0.8))) {
		return tc.token, nil
	}
	pod := pr.getPod()
	exp := int64(3600)
	if src.ExpirationSeconds != nil {
		exp = *src.ExpirationSeconds
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	tr, err := pr.p.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token request for serviceaccount %s/%s: %w", pod.Namespace, sa, err)
	}
	tc = &tokenCache{token: tr.Status.Token, issued: now, expires: tr.Status.ExpirationTimestamp.Time}
	if !tc.expires.After(now) {
		tc.expires = now.Add(time.Duration(exp) * time.Second)
	}
	pr.mu.Lock()
	pr.tokens[key] = tc
	pr.mu.Unlock()
	return tc.token, nil
}

// prepareVolumes materialises every pod volume and returns name -> host path.
func (pr *podRuntime) prepareVolumes(ctx context.Context) (map[string]string, error) {
	pod := pr.getPod()
	out := map[string]string{}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		dir := filepath.Join(pr.dir, "volumes", v.Name)
		switch {
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return nil, err
			}
			_ = os.Chmod(dir, 0o777)
			if v.EmptyDir.Medium == corev1.StorageMediumMemory && !isMountPoint(dir) {
				if _, err := run("mount", "-t", "tmpfs", "-o", "mode=0777", "tmpfs", dir); err != nil {
					return nil, err
				}
				pr.mu.Lock()
				pr.state.MemoryMounts = appendUnique(pr.state.MemoryMounts, dir)
				pr.mu.Unlock()
				pr.saveState()
			}
			out[v.Name] = dir
		case v.HostPath != nil:
			p := v.HostPath.Path
			t := corev1.HostPathUnset
			if v.HostPath.Type != nil {
				t = *v.HostPath.Type
			}
			switch t {
			case corev1.HostPathDirectoryOrCreate:
				if err := os.MkdirAll(p, 0o755); err != nil {
					return nil, err
				}
			case corev1.HostPathFileOrCreate:
				if _, err := os.Stat(p); err != nil {
					_ = os.MkdirAll(filepath.Dir(p), 0o755)
					f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
					if err != nil {
						return nil, err
					}
					f.Close()
				}
			case corev1.HostPathDirectory, corev1.HostPathFile, corev1.HostPathSocket:
				if _, err := os.Stat(p); err != nil {
					return nil, &volumeError{"ContainerCreating", fmt.Errorf("hostPath %s: %w", p, err)}
				}
			}
			out[v.Name] = p
		case v.PersistentVolumeClaim != nil:
			p, err := pr.pvcPath(ctx, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return nil, &volumeError{"ContainerCreating", err}
			}
			out[v.Name] = p
		case v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil:
			files, err := pr.volumeFiles(ctx, v)
			if err != nil {
				return nil, &volumeError{"ContainerCreating", fmt.Errorf("volume %q: %w", v.Name, err)}
			}
			if err := writeFileSet(dir, files); err != nil {
				return nil, err
			}
			out[v.Name] = dir
		default:
			return nil, &volumeError{"ContainerCreating", fmt.Errorf("volume %q: unsupported volume type", v.Name)}
		}
	}
	return out, nil
}

// refreshVolumes rewrites projected/secret/configMap/downwardAPI volumes
// (service account tokens are renewed at 80% of their lifetime).
func (pr *podRuntime) refreshVolumes(ctx context.Context) {
	pod := pr.getPod()
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.ConfigMap == nil && v.Secret == nil && v.DownwardAPI == nil && v.Projected == nil {
			continue
		}
		files, err := pr.volumeFiles(ctx, v)
		if err != nil {
			pr.logf("refresh volume %s: %v", v.Name, err)
			continue
		}
		_ = writeFileSet(filepath.Join(pr.dir, "volumes", v.Name), files)
	}
}

func (pr *podRuntime) pvcPath(ctx context.Context, ns, claim string) (string, error) {
	pvc, err := pr.p.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentvolumeclaim %q: %w", claim, err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("persistentvolumeclaim %q is not bound yet (phase %s)", claim, pvc.Status.Phase)
	}
	pv, err := pr.p.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentvolume %q: %w", pvc.Spec.VolumeName, err)
	}
	var p string
	switch {
	case pv.Spec.HostPath != nil:
		p = pv.Spec.HostPath.Path
		if pv.Spec.HostPath.Type != nil && *pv.Spec.HostPath.Type == corev1.HostPathDirectoryOrCreate {
			_ = os.MkdirAll(p, 0o777)
		}
	case pv.Spec.Local != nil:
		p = pv.Spec.Local.Path
	default:
		return "", fmt.Errorf("persistentvolume %q is neither hostPath nor local", pv.Name)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("persistentvolume %q path: %w", pv.Name, err)
	}
	return p, nil
}

// containerMounts turns volumeMounts into init mounts (after the image binds).
func (pr *podRuntime) containerMounts(c *corev1.Container, vols map[string]string, img *ImageEntry, env []EnvPair) ([]initproc.Mount, error) {
	var ms []initproc.Mount
	if img != nil {
		for _, b := range img.SortedBinds() {
			ms = append(ms, initproc.Mount{Source: b[0], Target: b[1]})
		}
	}
	for _, vm := range c.VolumeMounts {
		src, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %q refers to an unknown volume", vm.Name)
		}
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			sp := vm.SubPath
			if vm.SubPathExpr != "" {
				sp = Expand(vm.SubPathExpr, MapFunc(env))
			}
			if strings.Contains(sp, "..") {
				return nil, fmt.Errorf("subPath %q must not contain '..'", sp)
			}
			src = filepath.Join(src, sp)
			if _, err := os.Stat(src); err != nil {
				if err := os.MkdirAll(src, 0o777); err != nil {
					return nil, err
				}
			}
		}
		ms = append(ms, initproc.Mount{Source: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
	}
	if !pr.getPod().Spec.HostNetwork {
		for _, f := range []string{"hosts", "resolv.conf", "hostname"} {
			ms = append(ms, initproc.Mount{Source: filepath.Join(pr.dir, "etc", f), Target: "/etc/" + f})
		}
	} else if pr.getPod().Spec.DNSPolicy == corev1.DNSClusterFirstWithHostNet {
		ms = append(ms, initproc.Mount{Source: filepath.Join(pr.dir, "etc", "resolv.conf"), Target: "/etc/resolv.conf"})
	}
	return ms, nil
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

func isMountPoint(p string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == p {
			return true
		}
	}
	return false
}
