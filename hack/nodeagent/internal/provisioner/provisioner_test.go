package provisioner

import (
	"context"
	"log"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestProvisionAndDelete(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	client := fake.NewClientset()
	c := &Controller{client: client, baseDir: base, class: "local-path", logger: log.New(os.Stderr, "", 0)}
	if err := c.EnsureStorageClass(ctx); err != nil {
		t.Fatal(err)
	}
	sc, err := client.StorageV1().StorageClasses().Get(ctx, "local-path", metav1.GetOptions{})
	if err != nil || sc.Provisioner != ProvisionerName || sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" ||
		*sc.VolumeBindingMode != "Immediate" || *sc.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Fatalf("storage class: %+v %v", sc, err)
	}
	if err := c.EnsureStorageClass(ctx); err != nil { // idempotent
		t.Fatal(err)
	}
	class, other := "local-path", "other"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "1234"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	if err := c.syncClaim(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, "pvc-1234", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "pvc-1234")
	if pv.Spec.HostPath == nil || pv.Spec.HostPath.Path != dir || pv.Spec.ClaimRef.Name != "data" ||
		pv.Spec.Capacity.Storage().String() != "2Gi" || pv.Spec.NodeAffinity != nil {
		t.Fatalf("pv: %+v", pv.Spec)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("dir: %v", err)
	}
	// another class is not ours
	pvc2 := pvc.DeepCopy()
	pvc2.UID, pvc2.Spec.StorageClassName = "5678", &other
	_ = c.syncClaim(ctx, pvc2)
	if _, err := client.CoreV1().PersistentVolumes().Get(ctx, "pvc-5678", metav1.GetOptions{}); err == nil {
		t.Fatal("provisioned a claim of another class")
	}
	// bound: nothing happens; released: directory and PV go
	_ = os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	if err := c.syncVolume(ctx, pv); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal("removed a volume that is not released")
	}
	pv.Status.Phase = corev1.VolumeReleased
	if err := c.syncVolume(ctx, pv); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatal("released volume directory not removed")
	}
	if _, err := client.CoreV1().PersistentVolumes().Get(ctx, "pvc-1234", metav1.GetOptions{}); err == nil {
		t.Fatal("released PV not deleted")
	}
}

func TestExpandableClassGrowsBoundClaims(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	c := &Controller{client: client, baseDir: t.TempDir(), class: "local-path", expandable: "local-path-expandable", logger: log.New(os.Stderr, "", 0)}
	if err := c.EnsureStorageClass(ctx); err != nil {
		t.Fatal(err)
	}
	fixed, err := client.StorageV1().StorageClasses().Get(ctx, "local-path", metav1.GetOptions{})
	if err != nil || fixed.AllowVolumeExpansion == nil || *fixed.AllowVolumeExpansion {
		t.Fatalf("the default class must not expand: %+v %v", fixed, err)
	}
	grows, err := client.StorageV1().StorageClasses().Get(ctx, "local-path-expandable", metav1.GetOptions{})
	if err != nil || !*grows.AllowVolumeExpansion || grows.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
		t.Fatalf("expandable class: %+v %v", grows, err)
	}
	class := "local-path-expandable"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "42"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	if err := c.syncClaim(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, "pvc-42", metav1.GetOptions{})
	if err != nil || pv.Spec.StorageClassName != class {
		t.Fatalf("pv of the expandable class: %+v %v", pv, err)
	}
	// Bound at 1Gi, then asked for 2Gi.
	pvc.Spec.VolumeName = pv.Name
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	if _, err := client.CoreV1().PersistentVolumeClaims("ns").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.syncClaim(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pv, _ = client.CoreV1().PersistentVolumes().Get(ctx, "pvc-42", metav1.GetOptions{})
	claim, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "data", metav1.GetOptions{})
	if pv.Spec.Capacity.Storage().String() != "2Gi" || claim.Status.Capacity.Storage().String() != "2Gi" {
		t.Fatalf("not expanded: pv %s, claim %s", pv.Spec.Capacity.Storage(), claim.Status.Capacity.Storage())
	}
	// A bound claim of the default class is never touched (the API server refuses its growth).
	fixedClass := "local-path"
	other := pvc.DeepCopy()
	other.Name, other.UID, other.Spec.StorageClassName = "fixed", "43", &fixedClass
	other.Spec.VolumeName = "pvc-43"
	if err := c.syncClaim(ctx, other); err != nil {
		t.Fatalf("a claim of the default class: %v", err)
	}
}
