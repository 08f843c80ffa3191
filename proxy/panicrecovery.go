package proxy

import (
	"fmt"
	"net/http"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// withPanicRecovery answers a panic further in with a 500 Status that
// points to the log, instead of net/http's dropped connection; the panic
// value stays in the log, where no caller can read it.
func withPanicRecovery(next http.Handler, log *zap.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p) // the standard way to abort a stream; let net/http handle it
				}
				log.Error("panic while serving request", zap.Any("panic", p), zap.String("path", r.URL.Path), zap.Stack("stack"))
				WriteStatus(w, apierrors.NewInternalError(fmt.Errorf("the proxy hit an internal error; see its log")))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
