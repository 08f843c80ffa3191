package drifts

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kausality-io/kausality-proxy/intercept/objects"
)

// noObjects stands in for the object caches: New only registers with them.
type noObjects struct{ observers int }

func (*noObjects) GetKindShared(context.Context, schema.GroupKind, string, string) (*unstructured.Unstructured, objects.Source, error) {
	return nil, "", nil
}
func (*noObjects) GetMetadata(context.Context, schema.GroupVersionResource, string, string) (*unstructured.Unstructured, objects.Source, error) {
	return nil, "", nil
}
func (*noObjects) WaitForMetadataSync(context.Context, schema.GroupVersionResource) error { return nil }
func (*noObjects) Mapping(schema.GroupVersionKind) (*meta.RESTMapping, error)             { return nil, nil }
func (*noObjects) WaitForSync(context.Context, schema.GroupVersionResource) error         { return nil }
func (*noObjects) CachesParentsOf(schema.GroupVersionResource) bool                       { return false }
func (n *noObjects) AddObserver(objects.Observer)                                         { n.observers++ }

func TestNewRefusesWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		options func(*Options)
		want    string
	}{
		{name: "the defaults", options: func(*Options) {}},
		{name: "a receiver URL that is not http(s)", options: func(o *Options) { o.Receivers = []string{"ftp://sink/"} },
			want: "drift webhook URL #0"},
		{name: "a lease no longer than its renewal", options: func(o *Options) {
			o.LeaseDuration, o.RenewDeadline = 5*time.Second, 5*time.Second
		}, want: "election"},
		{name: "a renewal within the retry period", options: func(o *Options) {
			o.RenewDeadline, o.RetryPeriod = 2*time.Second, 2*time.Second
		}, want: "election"},
		{name: "no client", options: func(o *Options) { o.Client = nil }, want: "client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := &noObjects{}
			o := Options{Client: fake.NewClientset(), Objects: objs}
			tc.options(&o)
			l, err := New(o)
			if tc.want == "" {
				if err != nil || l == nil {
					t.Fatalf("New = %v", err)
				}
				if objs.observers != 1 {
					t.Errorf("registered with the object caches %d times", objs.observers)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error about %q", err, tc.want)
			}
			if objs.observers != 0 {
				t.Error("a ledger that was refused still registered with the object caches")
			}
		})
	}
}
