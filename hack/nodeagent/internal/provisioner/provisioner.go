// Package provisioner is a small dynamic provisioner for the local-path
// StorageClass: every PV is a hostPath directory under --base-dir (all nodes
// of the local cluster share the host's disk, so there is no node affinity).
// A second class (--expandable-storage-class) allows volume expansion, which
// it serves as CSI's external-resizer does for a volume that needs no node
// step: a claim's larger request becomes its volume's and its own capacity.
// The default class does not: the API server refuses to grow its claims, as
// with a cloud class that cannot expand.
package provisioner

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

// ProvisionerName is the StorageClass provisioner we serve.
const ProvisionerName = "quorumkeeper.dev/local-path"

const annProvisionedBy = "pv.kubernetes.io/provisioned-by"
const annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
const annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"

// Controller provisions, expands and deletes PVs.
type Controller struct {
	client  kubernetes.Interface
	baseDir string
	class   string // the cluster default, which cannot expand
	// expandable is the class that allows volume expansion ("" for none).
	expandable string
	logger     *log.Logger
}

// Main implements `nodeagent provision`.
func Main(args []string) error {
	fs := flag.NewFlagSet("provision", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig")
	baseDir := fs.String("base-dir", "/var/lib/quorumkeeper/pv", "directory holding one sub-directory per PV")
	class := fs.String("storage-class", "local-path", "StorageClass to create (as cluster default) and serve")
	expandable := fs.String("expandable-storage-class", "", "StorageClass allowing volume expansion to create and serve")
	_ = fs.Parse(args)
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*baseDir, 0o755); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	c := &Controller{client: client, baseDir: *baseDir, class: *class, expandable: *expandable, logger: log.New(os.Stderr, "provisioner ", log.LstdFlags)}
	return c.Run(ctx)
}

// EnsureStorageClass creates the StorageClasses when missing: the default one
// and the expandable one.
func (c *Controller) EnsureStorageClass(ctx context.Context) error {
	if err := c.ensureClass(ctx, c.class, true, false); err != nil {
		return err
	}
	if c.expandable == "" {
		return nil
	}
	return c.ensureClass(ctx, c.expandable, false, true)
}

func (c *Controller) ensureClass(ctx context.Context, name string, isDefault, expandable bool) error {
	_, err := c.client.StorageV1().StorageClasses().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	mode := storagev1.VolumeBindingImmediate
	policy := corev1.PersistentVolumeReclaimDelete
	sc := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: name},
		Provisioner:          ProvisionerName,
		VolumeBindingMode:    &mode,
		ReclaimPolicy:        &policy,
		AllowVolumeExpansion: &expandable,
	}
	if isDefault {
		sc.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
	}
	_, err = c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err == nil {
		c.logger.Printf("created StorageClass %s (default %v, expandable %v)", name, isDefault, expandable)
	}
	return err
}

// Run runs the controller until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	for {
		err := c.EnsureStorageClass(ctx)
		if err == nil {
			break
		}
		c.logger.Printf("storage class: %v (retrying)", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	f := informers.NewSharedInformerFactory(c.client, 30*time.Second)
	pvcInf := f.Core().V1().PersistentVolumeClaims()
	pvInf := f.Core().V1().PersistentVolumes()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(prefix string) func(obj any) {
		return func(obj any) {
			if k, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				q.Add(prefix + k)
			}
		}
	}
	_, _ = pvcInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue("pvc:"), UpdateFunc: func(_, o any) { enqueue("pvc:")(o) },
	})
	_, _ = pvInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue("pv:"), UpdateFunc: func(_, o any) { enqueue("pv:")(o) },
	})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	c.logger.Printf("serving StorageClass %s (%s), base dir %s", c.class, ProvisionerName, c.baseDir)
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for {
		item, shutdown := q.Get()
		if shutdown {
			return nil
		}
		var err error
		if strings.HasPrefix(item, "pvc:") {
			ns, name, _ := cache.SplitMetaNamespaceKey(strings.TrimPrefix(item, "pvc:"))
			pvc, gerr := pvcInf.Lister().PersistentVolumeClaims(ns).Get(name)
			if gerr == nil {
				err = c.syncClaim(ctx, pvc)
			}
		} else {
			pv, gerr := pvInf.Lister().Get(strings.TrimPrefix(item, "pv:"))
			if gerr == nil {
				err = c.syncVolume(ctx, pv)
			}
		}
		if err != nil {
			c.logger.Printf("%s: %v", item, err)
			q.AddRateLimited(item)
		} else {
			q.Forget(item)
		}
		q.Done(item)
	}
}

// classOf is the claim's StorageClass name.
func classOf(pvc *corev1.PersistentVolumeClaim) string {
	sc := ""
	if pvc.Spec.StorageClassName != nil {
		sc = *pvc.Spec.StorageClassName
	}
	if sc == "" {
		// the DefaultStorageClass admission plugin fills it in; accept our class annotations too
		sc = pvc.Annotations["volume.beta.kubernetes.io/storage-class"]
	}
	return sc
}

func (c *Controller) ours(pvc *corev1.PersistentVolumeClaim) bool {
	if sc := classOf(pvc); sc != c.class && (c.expandable == "" || sc != c.expandable) {
		return false
	}
	if p := pvc.Annotations[annStorageProvisioner]; p != "" && p != ProvisionerName {
		return false
	}
	return true
}

// PVName is the PV name for a claim (like external-provisioner: pvc-<uid>).
func PVName(pvc *corev1.PersistentVolumeClaim) string { return "pvc-" + string(pvc.UID) }

func (c *Controller) syncClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Status.Phase == corev1.ClaimBound && c.ours(pvc) && pvc.DeletionTimestamp == nil {
		return c.expand(ctx, pvc)
	}
	if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" || !c.ours(pvc) || pvc.DeletionTimestamp != nil {
		return nil
	}
	name := PVName(pvc)
	if _, err := c.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		return nil
	}
	req := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	dir := filepath.Join(c.baseDir, name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	_ = os.Chmod(dir, 0o777)
	hpType := corev1.HostPathDirectoryOrCreate
	modes := pvc.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{annProvisionedBy: ProvisionerName},
			Labels:      map[string]string{"quorumkeeper.dev/local-path": "true"},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: req},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              classOf(pvc),
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name,
				UID: pvc.UID, ResourceVersion: pvc.ResourceVersion,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hpType},
			},
		},
	}
	if sc, err := c.client.StorageV1().StorageClasses().Get(ctx, classOf(pvc), metav1.GetOptions{}); err == nil && sc.ReclaimPolicy != nil {
		pv.Spec.PersistentVolumeReclaimPolicy = *sc.ReclaimPolicy
	}
	_, err := c.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create pv %s: %w", name, err)
	}
	c.logger.Printf("provisioned %s for %s/%s (%s) at %s", name, pvc.Namespace, pvc.Name, req.String(), dir)
	return nil
}

// expand gives a bound claim of the expandable class the size it asks for:
// its volume's capacity first, then the claim's status (a hostPath directory
// has no filesystem to grow, so there is no node step). The API server only
// lets a claim grow when its class allows expansion.
func (c *Controller) expand(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if c.expandable == "" || classOf(pvc) != c.expandable || pvc.Spec.VolumeName == "" {
		return nil
	}
	want := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	have := pvc.Status.Capacity[corev1.ResourceStorage]
	if want.Cmp(have) <= 0 {
		return nil
	}
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pv.Annotations[annProvisionedBy] != ProvisionerName {
		return nil
	}
	if capacity := pv.Spec.Capacity[corev1.ResourceStorage]; capacity.Cmp(want) < 0 {
		pv = pv.DeepCopy()
		pv.Spec.Capacity[corev1.ResourceStorage] = want
		if _, err := c.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("expand pv %s: %w", pv.Name, err)
		}
	}
	claim := pvc.DeepCopy()
	if claim.Status.Capacity == nil {
		claim.Status.Capacity = corev1.ResourceList{}
	}
	claim.Status.Capacity[corev1.ResourceStorage] = want
	claim.Status.Conditions = nil
	claim.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: want}
	claim.Status.AllocatedResourceStatuses = nil
	if _, err := c.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("expand pvc %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	c.logger.Printf("expanded %s for %s/%s from %s to %s", pv.Name, pvc.Namespace, pvc.Name, have.String(), want.String())
	return nil
}

func (c *Controller) syncVolume(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Annotations[annProvisionedBy] != ProvisionerName {
		return nil
	}
	if pv.Status.Phase != corev1.VolumeReleased || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	if pv.Spec.HostPath != nil {
		dir := pv.Spec.HostPath.Path
		// only ever remove directories directly under our base dir
		if filepath.Dir(filepath.Clean(dir)) == filepath.Clean(c.baseDir) && filepath.Base(dir) == pv.Name {
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("remove %s: %w", dir, err)
			}
		}
	}
	err := c.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	c.logger.Printf("deleted released %s", pv.Name)
	return nil
}
