package agent

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Expand performs Kubernetes $(VAR) expansion: $(NAME) is replaced when NAME
// is defined, otherwise left as is; $$ escapes a dollar sign.
func Expand(input string, mapping func(string) (string, bool)) string {
	var buf strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(input); cursor++ {
		if input[cursor] == '$' && cursor+1 < len(input) {
			buf.WriteString(input[checkpoint:cursor])
			read, isVar, advance := tryReadVariableName(input[cursor+1:])
			if isVar {
				if v, ok := mapping(read); ok {
					buf.WriteString(v)
				} else {
					buf.WriteString("$(" + read + ")")
				}
			} else {
				buf.WriteString(read)
			}
			cursor += advance
			checkpoint = cursor + 1
		}
	}
	return buf.String() + input[checkpoint:]
}

func tryReadVariableName(input string) (string, bool, int) {
	switch input[0] {
	case '$':
		return "$", false, 1
	case '(':
		for i := 1; i < len(input); i++ {
			if input[i] == ')' {
				return input[1:i], true, i + 1
			}
		}
		return "$(", false, 1
	default:
		return "$" + string(input[0]), false, 1
	}
}

// MapFunc returns a lookup function over an ordered env list (later wins).
func MapFunc(env []EnvPair) func(string) (string, bool) {
	m := map[string]string{}
	for _, e := range env {
		m[e.Name] = e.Value
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// EnvPair is one resolved environment variable.
type EnvPair struct{ Name, Value string }

// EnvSources gives access to the objects env vars can reference.
type EnvSources interface {
	GetSecret(ctx context.Context, ns, name string) (*corev1.Secret, error)
	GetConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error)
}

// PodFieldValue resolves a downward API fieldRef path.
func PodFieldValue(pod *corev1.Pod, podIP, hostIP, path string) (string, error) {
	switch {
	case path == "metadata.name":
		return pod.Name, nil
	case path == "metadata.namespace":
		return pod.Namespace, nil
	case path == "metadata.uid":
		return string(pod.UID), nil
	case path == "spec.nodeName":
		return pod.Spec.NodeName, nil
	case path == "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case path == "status.podIP", path == "status.podIPs":
		return podIP, nil
	case path == "status.hostIP", path == "status.hostIPs":
		return hostIP, nil
	case path == "metadata.labels":
		return formatMap(pod.Labels), nil
	case path == "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case strings.HasPrefix(path, "metadata.labels['") && strings.HasSuffix(path, "']"):
		return pod.Labels[path[len("metadata.labels['"):len(path)-2]], nil
	case strings.HasPrefix(path, "metadata.annotations['") && strings.HasSuffix(path, "']"):
		return pod.Annotations[path[len("metadata.annotations['"):len(path)-2]], nil
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(k + "=" + strconv.Quote(m[k]))
	}
	return b.String()
}

// ResourceFieldValue resolves a resourceFieldRef like kubelet does: the
// container limit (node allocatable when unset) divided by the divisor, rounded up.
func ResourceFieldValue(c *corev1.Container, ref *corev1.ResourceFieldSelector, alloc corev1.ResourceList) (string, error) {
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	get := func(rl corev1.ResourceList, name corev1.ResourceName) (resource.Quantity, bool) {
		q, ok := rl[name]
		return q, ok
	}
	var q resource.Quantity
	var ok bool
	switch ref.Resource {
	case "limits.cpu":
		if q, ok = get(c.Resources.Limits, corev1.ResourceCPU); !ok {
			q = alloc[corev1.ResourceCPU]
		}
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	case "requests.cpu":
		if q, ok = get(c.Resources.Requests, corev1.ResourceCPU); !ok {
			if q, ok = get(c.Resources.Limits, corev1.ResourceCPU); !ok {
				q = resource.Quantity{}
			}
		}
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	case "limits.memory", "limits.ephemeral-storage":
		name := corev1.ResourceName(strings.TrimPrefix(ref.Resource, "limits."))
		if q, ok = get(c.Resources.Limits, name); !ok {
			q = alloc[name]
		}
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	case "requests.memory", "requests.ephemeral-storage":
		name := corev1.ResourceName(strings.TrimPrefix(ref.Resource, "requests."))
		if q, ok = get(c.Resources.Requests, name); !ok {
			if q, ok = get(c.Resources.Limits, name); !ok {
				q = resource.Quantity{}
			}
		}
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	}
	return "", fmt.Errorf("unsupported resourceFieldRef %q", ref.Resource)
}

// EnvInput collects what ResolveEnv needs.
type EnvInput struct {
	Pod       *corev1.Pod
	Container *corev1.Container
	PodIP     string
	HostIP    string
	Alloc     corev1.ResourceList
	Base      []EnvPair // image env, service env: lowest precedence
	Sources   EnvSources
}

// ResolveEnv builds the container environment in Kubernetes order: image
// env, then envFrom, then env (with $(VAR) expansion against what came before).
func ResolveEnv(ctx context.Context, in EnvInput) ([]EnvPair, error) {
	out := append([]EnvPair{}, in.Base...)
	set := func(k, v string) {
		for i := range out {
			if out[i].Name == k {
				out[i].Value = v
				return
			}
		}
		out = append(out, EnvPair{k, v})
	}
	ns := in.Pod.Namespace
	c := in.Container
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm, err := in.Sources.GetConfigMap(ctx, ns, ef.ConfigMapRef.Name)
			if err != nil {
				if ef.ConfigMapRef.Optional != nil && *ef.ConfigMapRef.Optional {
					continue
				}
				return nil, fmt.Errorf("envFrom configmap %s: %w", ef.ConfigMapRef.Name, err)
			}
			keys := sortedKeys(cm.Data)
			for _, k := range keys {
				set(ef.Prefix+k, cm.Data[k])
			}
		case ef.SecretRef != nil:
			s, err := in.Sources.GetSecret(ctx, ns, ef.SecretRef.Name)
			if err != nil {
				if ef.SecretRef.Optional != nil && *ef.SecretRef.Optional {
					continue
				}
				return nil, fmt.Errorf("envFrom secret %s: %w", ef.SecretRef.Name, err)
			}
			keys := make([]string, 0, len(s.Data))
			for k := range s.Data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				set(ef.Prefix+k, string(s.Data[k]))
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, Expand(e.Value, MapFunc(out)))
			continue
		}
		vf := e.ValueFrom
		switch {
		case vf.FieldRef != nil:
			v, err := PodFieldValue(in.Pod, in.PodIP, in.HostIP, vf.FieldRef.FieldPath)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, v)
		case vf.ResourceFieldRef != nil:
			target := c
			if vf.ResourceFieldRef.ContainerName != "" && vf.ResourceFieldRef.ContainerName != c.Name {
				target = findContainer(in.Pod, vf.ResourceFieldRef.ContainerName)
				if target == nil {
					return nil, fmt.Errorf("env %s: container %s not found", e.Name, vf.ResourceFieldRef.ContainerName)
				}
			}
			v, err := ResourceFieldValue(target, vf.ResourceFieldRef, in.Alloc)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, v)
		case vf.ConfigMapKeyRef != nil:
			r := vf.ConfigMapKeyRef
			optional := r.Optional != nil && *r.Optional
			cm, err := in.Sources.GetConfigMap(ctx, ns, r.Name)
			if err != nil {
				if optional {
					continue
				}
				return nil, fmt.Errorf("env %s: configmap %s: %w", e.Name, r.Name, err)
			}
			v, ok := cm.Data[r.Key]
			if !ok {
				if b, ok2 := cm.BinaryData[r.Key]; ok2 {
					v, ok = string(b), true
				}
			}
			if !ok {
				if optional {
					continue
				}
				return nil, fmt.Errorf("env %s: key %s not in configmap %s", e.Name, r.Key, r.Name)
			}
			set(e.Name, v)
		case vf.SecretKeyRef != nil:
			r := vf.SecretKeyRef
			optional := r.Optional != nil && *r.Optional
			s, err := in.Sources.GetSecret(ctx, ns, r.Name)
			if err != nil {
				if optional {
					continue
				}
				return nil, fmt.Errorf("env %s: secret %s: %w", e.Name, r.Name, err)
			}
			b, ok := s.Data[r.Key]
			if !ok {
				if optional {
					continue
				}
				return nil, fmt.Errorf("env %s: key %s not in secret %s", e.Name, r.Key, r.Name)
			}
			set(e.Name, string(b))
		}
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// Argv computes the process argv from image entrypoint/cmd and container
// command/args (command replaces entrypoint, args replace cmd; when command is
// set without args the image cmd is dropped), expanding $(VAR).
func Argv(img *ImageEntry, c *corev1.Container, env []EnvPair) []string {
	var entry, cmd []string
	if img != nil {
		entry, cmd = img.Entrypoint, img.Cmd
	}
	if len(c.Command) > 0 {
		entry = c.Command
		cmd = nil
	}
	if len(c.Args) > 0 {
		cmd = c.Args
	}
	m := MapFunc(env)
	var out []string
	for _, a := range append(append([]string{}, entry...), cmd...) {
		out = append(out, Expand(a, m))
	}
	return out
}
