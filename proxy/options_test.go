package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// An invalid --config file refuses to start, naming the line and field.
func TestInvalidConfigFileRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: dc\n  match: {serviceAccount: kube-system/deployment-controller}\n  mode: loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.ConfigFile = path
	o.UpstreamConfig = &rest.Config{Host: "https://127.0.0.1:1"}
	o.SecureServing.ServerCert.CertDirectory = filepath.Join(dir, "certs")
	o.SecureServing.BindPort = 0
	o.MetricsBindAddress = "127.0.0.1:0"
	var err error
	if o.SecureServing.Listener, err = listenLocal(); err != nil {
		t.Fatal(err)
	}
	_, err = o.Config(nil)
	if err == nil || !strings.Contains(err.Error(), path+": line 6: controllers[0].mode: must be shadow, log or enforce") {
		t.Fatalf("error %v", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	o := NewOptions()
	o.DefaultMode = "loud"
	o.FailurePolicy = "Maybe"
	o.RequestTimeout = 0
	o.MaxRequestBodyBytes = -1
	errs := o.Validate()
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{
		`--default-mode must be log or enforce, not "loud"`,
		`--failure-policy must be Fail or Ignore, not "Maybe"`,
		"--request-timeout must be positive",
		"--max-request-body-bytes must be positive",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing %q in\n%s", want, joined)
		}
	}
}

func TestValidateBoundsTheUnboundStatusRecordDelay(t *testing.T) {
	for _, tc := range []struct {
		delay time.Duration
		valid bool
	}{
		{0, true},
		{30 * time.Second, true},
		{time.Hour, true},
		{-time.Second, false},
		{time.Hour + time.Second, false},
	} {
		o := NewOptions()
		o.UnboundStatusRecordDelay = tc.delay
		var found string
		for _, err := range o.Validate() {
			if strings.Contains(err.Error(), "--unbound-status-record-delay") {
				found = err.Error()
			}
		}
		if tc.valid && found != "" {
			t.Errorf("%s: %s", tc.delay, found)
		}
		if !tc.valid && found != "--unbound-status-record-delay must be between 0s and 1h0m0s, not "+tc.delay.String()+
			": until a record lands, its parent's controller writes pass as carrying out its spec" {
			t.Errorf("%s: got %q", tc.delay, found)
		}
	}
}
