package internal

import (
	_ "k8s.io/apiserver/pkg/authentication/request/x509"
	_ "k8s.io/apiserver/pkg/endpoints/request"
	_ "k8s.io/apimachinery/pkg/util/proxy"
	_ "k8s.io/client-go/rest"
	_ "k8s.io/api/core/v1"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "go.uber.org/zap"
	_ "github.com/go-logr/zapr"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	_ "k8s.io/component-base/metrics"
	_ "github.com/spf13/pflag"
	_ "golang.org/x/net/http2"
)

