package proxy

import (
	"net/http"

	"k8s.io/apimachinery/pkg/util/sets"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
)

// buildHandler composes the serving chain, outermost first:
//
//	write stack → early answer close → panic recovery → request info →
//	metrics → upgrade restriction → authentication → impersonation →
//	max mutating in flight → request deadline → write interception →
//	upstream
//
// Each filter lives in a file named for it, with its own table test.
// Nothing before authentication talks to the upstream, so a request that
// fails authentication or impersonation sends zero bytes upstream. The
// interceptor authorizes a write before it does any work for it.
func (s *Server) buildHandler() http.Handler {
	var h http.Handler = s.upstream
	h = s.interceptor.Wrap(h, WriteStatus)
	h = withRequestDeadline(h, s.longRunning, s.requestTimeout, s.drainCtx, s.clock)
	h = withMaxMutatingInFlight(h, s.maxMutatingInFlight, s.longRunning, s.metrics)
	h = withImpersonation(h, s.authenticator, s.metrics)
	h = withAuthentication(h, s.authenticator, s.metrics, s.log)
	h = withUpgradeRestriction(h)
	h = withRequestMetrics(h, s.metrics, s.longRunning, s.clock)
	h = genericapifilters.WithRequestInfo(h, s.requestInfo)
	h = withPanicRecovery(h, s.log)
	h = withEarlyAnswerClose(h)
	h = withWriteStack(h)
	return h
}

func newLongRunningCheck() request.LongRunningRequestCheck {
	return genericfilters.BasicLongRunningRequestCheck(
		sets.NewString("watch", "proxy"),
		sets.NewString("attach", "exec", "proxy", "log", "portforward"),
	)
}
