package sidewrites

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Every annotation side write goes through one loop: a conflict (someone
// wrote in between) is read and computed again, a bounded number of times;
// an object gone, replaced or with nothing left to write ends it quietly.
func TestRebaseAnnotations(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	conflict := apierrors.NewConflict(gvr.GroupResource(), "web", errors.New("the object has been modified"))
	boom := errors.New("connection reset")
	tests := []struct {
		name string
		// patchErrs are the answers to the patches in turn (nil: stored).
		patchErrs   []error
		readErr     error
		gone        bool
		nothingLeft bool
		wantReads   int
		wantPatches int
		wantErr     error
	}{
		{name: "written at once", patchErrs: []error{nil}, wantReads: 1, wantPatches: 1},
		{name: "a conflict is read and written again", patchErrs: []error{conflict, conflict, nil}, wantReads: 3, wantPatches: 3},
		{name: "conflicts without end give up", patchErrs: []error{conflict, conflict, conflict, conflict, conflict, conflict},
			wantReads: maxSideWriteAttempts, wantPatches: maxSideWriteAttempts, wantErr: conflict},
		{name: "another error ends it", patchErrs: []error{boom}, wantReads: 1, wantPatches: 1, wantErr: boom},
		{name: "deleted before the patch", patchErrs: []error{apierrors.NewNotFound(gvr.GroupResource(), "web")}, wantReads: 1, wantPatches: 1},
		{name: "deleted before the read", readErr: apierrors.NewNotFound(gvr.GroupResource(), "web"), wantReads: 1},
		{name: "a failed read", readErr: boom, wantReads: 1, wantErr: boom},
		{name: "replaced, or moved on", gone: true, wantReads: 1},
		{name: "nothing left to write", nothingLeft: true, wantReads: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
			patches := 0
			dyn.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
				err := tt.patchErrs[patches]
				patches++
				return true, &unstructured.Unstructured{}, err
			})
			reads := 0
			read := func() (*unstructured.Unstructured, error) {
				reads++
				if tt.readErr != nil || tt.gone {
					return nil, tt.readErr
				}
				u := &unstructured.Unstructured{}
				u.SetResourceVersion("1")
				return u, nil
			}
			v := "x"
			patch := func(*unstructured.Unstructured) map[string]*string {
				if tt.nothingLeft {
					return nil
				}
				return map[string]*string{"kausal.io/allowances": &v}
			}
			w := &Writer{Dynamic: dyn, FieldManager: "kausality-proxy"}
			err := w.rebaseAnnotations(context.Background(), dyn.Resource(gvr).Namespace("ns"), "web", read, patch)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if reads != tt.wantReads || patches != tt.wantPatches {
				t.Fatalf("%d reads and %d patches, want %d and %d", reads, patches, tt.wantReads, tt.wantPatches)
			}
		})
	}
}
