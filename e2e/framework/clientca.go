package framework

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"reflect"
	"unsafe"

	"github.com/kausality-io/kausality-proxy/internal/testpki"
)

// ClientCA returns the CA that kube-apiserver and the proxy both trust for
// client certificates (the proxy's --client-ca-file is kube-apiserver's), key
// included, so a scenario can sign certificates the trusted CA would never
// hand out through envtest: expired ones, ones for other key usages.
//
// envtest keeps that key in an unexported field and nowhere on disk; it is
// read by reflection, and the certificate is checked against the CA file
// both servers load, so a change in envtest fails loudly instead of signing
// with some other key.
func (l *Local) ClientCA() (*testpki.CA, error) {
	api := l.CP.Env.ControlPlane.APIServer
	if api == nil || api.SecureServing.Authn == nil {
		return nil, errors.New("envtest has no client-certificate authenticator")
	}
	v := reflect.ValueOf(api.SecureServing.Authn)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("envtest's authenticator is a %s, not a pointer to a struct", v.Type())
	}
	field := v.Elem().FieldByName("ca")
	if !field.IsValid() || field.Kind() != reflect.Pointer || field.IsNil() {
		return nil, fmt.Errorf("envtest's authenticator %s has no CA field", v.Type())
	}
	tiny := reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem().Elem()
	pair := tiny.FieldByName("CA")
	if !pair.IsValid() {
		return nil, fmt.Errorf("envtest's CA %s has no CA pair", tiny.Type())
	}
	key, ok := pair.FieldByName("Key").Interface().(crypto.Signer)
	if !ok {
		return nil, errors.New("envtest's CA key is not a crypto.Signer")
	}
	cert, ok := pair.FieldByName("Cert").Interface().(*x509.Certificate)
	if !ok || cert == nil {
		return nil, errors.New("envtest's CA has no certificate")
	}
	trusted, err := os.ReadFile(l.CP.ClientCAFile)
	if err != nil {
		return nil, err
	}
	ca := &testpki.CA{Cert: cert, Key: key, PEM: testpki.CertPEM(cert)}
	if !bytes.Contains(trusted, bytes.TrimSpace(ca.PEM)) {
		return nil, fmt.Errorf("the CA found in envtest is not the one in %s", l.CP.ClientCAFile)
	}
	return ca, nil
}
