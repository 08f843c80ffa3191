package intercept

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kausality-io/kausality-proxy/intercept/settlements"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

// A replica that has not read the settledness records would be lenient
// about parents the cluster records as settled: it is not ready until it
// has.
func TestNotReadyUntilTheSettlednessRecordsAreRead(t *testing.T) {
	store := settlements.New(fake.NewClientset(), "kausality-system", nil)
	i := New(Config{Settlements: store})
	if err := i.Ready(); !errors.Is(err, errSettlementsNotSynced) {
		t.Fatalf("Ready() before the records are read = %v, want %v", err, errSettlementsNotSynced)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store.Run(ctx)
	testutil.Eventually(t, 10*time.Second, "ready once the records are read", i.Ready)
}
