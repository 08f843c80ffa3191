package authn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apiserver/pkg/authentication/user"
)

func TestCallerNeverRevealsToken(t *testing.T) {
	const secret = "s3cr3t-t0ken-value"
	c := Caller{
		User:   &user.DefaultInfo{Name: "bob", UID: "bob-uid", Groups: []string{"team"}, Extra: map[string][]string{"k": {"v"}}},
		Method: MethodToken,
		Token:  secret,
	}
	pc := &c

	zapJSON := func(f func(*zap.Logger)) string {
		var buf bytes.Buffer
		core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zapcore.DebugLevel)
		f(zap.New(core))
		return buf.String()
	}
	slogJSON := func(v any) string {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "caller", v)
		return buf.String()
	}
	slogText := func(v any) string {
		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "caller", v)
		return buf.String()
	}
	mustJSON := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	renderings := map[string]string{
		"%v":                 fmt.Sprintf("%v", c),
		"%+v":                fmt.Sprintf("%+v", c),
		"%#v":                fmt.Sprintf("%#v", c),
		"%s":                 fmt.Sprintf("%s", c),
		"%q":                 fmt.Sprintf("%q", c),
		"%d":                 fmt.Sprintf("%d", c),
		"%x":                 fmt.Sprintf("%x", c),
		"pointer %+v":        fmt.Sprintf("%+v", pc),
		"pointer %#v":        fmt.Sprintf("%#v", pc),
		"in a slice %+v":     fmt.Sprintf("%+v", []*Caller{pc}),
		"in a struct %+v":    fmt.Sprintf("%+v", struct{ C Caller }{c}),
		"String":             c.String(),
		"json value":         mustJSON(c),
		"json pointer":       mustJSON(pc),
		"json nested":        mustJSON(map[string]any{"caller": pc}),
		"slog json":          slogJSON(c),
		"slog json pointer":  slogJSON(pc),
		"slog text":          slogText(c),
		"zap.Any":            zapJSON(func(l *zap.Logger) { l.Info("x", zap.Any("caller", c)) }),
		"zap.Any pointer":    zapJSON(func(l *zap.Logger) { l.Info("x", zap.Any("caller", pc)) }),
		"zap.Stringer":       zapJSON(func(l *zap.Logger) { l.Info("x", zap.Stringer("caller", pc)) }),
		"zapr (logr) value":  zapJSON(func(l *zap.Logger) { zapr.NewLogger(l).Info("x", "caller", c) }),
		"zapr (logr) ptr":    zapJSON(func(l *zap.Logger) { zapr.NewLogger(l).Info("x", "caller", pc) }),
		"error wrapping":     fmt.Errorf("denied %v", pc).Error(),
		"MarshalLog via fmt": fmt.Sprintf("%v", c.MarshalLog()),
	}
	for name, out := range renderings {
		if strings.Contains(out, secret) {
			t.Errorf("%s reveals the token: %s", name, out)
		}
		if !strings.Contains(out, "bob") {
			t.Errorf("%s lost the user name: %s", name, out)
		}
	}
	// The redaction marker shows the token exists.
	for _, name := range []string{"%v", "json value", "slog json", "zap.Any", "zapr (logr) value"} {
		if !strings.Contains(renderings[name], redacted) {
			t.Errorf("%s: no %s marker: %s", name, redacted, renderings[name])
		}
	}
	// And the field is still usable by code.
	if c.Token != secret {
		t.Fatal("token field altered")
	}
}

func TestCallerStringWithoutToken(t *testing.T) {
	c := Caller{User: &user.DefaultInfo{Name: "alice", Groups: []string{"dev"}}, Method: MethodX509}
	if got, want := c.String(), `{method=x509 user="alice" groups=["dev"]}`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	if got := (Caller{}).String(); got != `{method= user=""}` {
		t.Errorf("zero Caller String() = %s", got)
	}
}
