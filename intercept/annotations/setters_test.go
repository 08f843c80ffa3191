package annotations

import (
	"encoding/base64"
	"testing"
)

func TestRecordModeSetters(t *testing.T) {
	logDigest, enforceDigest := Digest([]byte("log")), Digest([]byte("enforce"))
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name      string
		record    string
		user      string
		old, new  map[string]string
		requested map[string]string
		want      string
	}{
		{name: "a mode set is its setter's", new: map[string]string{Mode: "log"}, want: "mode=bob:" + logDigest},
		{name: "both modes set", new: map[string]string{Mode: "log", AllowanceMode: "shadow"},
			want: "mode=bob:" + logDigest + ",allowance-mode=bob:" + Digest([]byte("shadow"))},
		{name: "a mode left keeps its setter", record: "mode=ctrl:" + logDigest + ":" + b64("enforce"),
			old: map[string]string{Mode: "log"}, new: map[string]string{Mode: "log", "team": "web"}, want: "mode=ctrl:" + logDigest + ":" + b64("enforce")},
		{name: "a mode changed around the proxy has no setter", record: "mode=ctrl:" + enforceDigest,
			old: map[string]string{Mode: "log"}, new: map[string]string{Mode: "log"}},
		{name: "a mode changed keeps the value before", record: "mode=ctrl:" + logDigest,
			old: map[string]string{Mode: "log"}, new: map[string]string{Mode: "enforce"}, want: "mode=bob:" + enforceDigest + ":" + b64("log")},
		{name: "its setter changing it again keeps the value before its first change", user: "ctrl", record: "mode=ctrl:" + logDigest + ":" + b64("enforce"),
			old: map[string]string{Mode: "log"}, new: map[string]string{Mode: "off"}, want: "mode=ctrl:" + Digest([]byte("off")) + ":" + b64("enforce")},
		{name: "a mode removed is recorded with the value before", old: map[string]string{Mode: "enforce"}, want: "mode=bob:-:" + b64("enforce")},
		{name: "a mode set again after its removal", user: "ctrl", record: "mode=ctrl:-:" + b64("enforce"), new: map[string]string{Mode: "log"},
			want: "mode=ctrl:" + logDigest + ":" + b64("enforce")},
		{name: "a mode the proxy removed is nobody's", record: "mode=ctrl:" + logDigest,
			old: map[string]string{Mode: "log"}, new: map[string]string{}, requested: map[string]string{Mode: "log"}},
		{name: "a mode the proxy kept keeps its setter", record: "mode=alice:" + enforceDigest,
			old: map[string]string{Mode: "enforce"}, new: map[string]string{Mode: "enforce"}, requested: map[string]string{Mode: "log"},
			want: "mode=alice:" + enforceDigest},
		{name: "a long value before is not kept", old: map[string]string{Mode: string(make([]byte, 65))}, new: map[string]string{Mode: "log"},
			want: "mode=bob:" + logDigest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			user := tc.user
			if user == "" {
				user = "bob"
			}
			requested := tc.requested
			if requested == nil {
				requested = tc.new
			}
			if got := RecordModeSetters(tc.record, tc.old, tc.new, requested, user); got != tc.want {
				t.Errorf("RecordModeSetters = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestModeSetBy(t *testing.T) {
	logDigest := Digest([]byte("log"))
	enforce := base64.RawURLEncoding.EncodeToString([]byte("enforce"))
	tests := []struct {
		ann  map[string]string
		want ModeSetting
	}{
		{map[string]string{Mode: "log", ModesBy: "mode=ctrl:" + logDigest}, ModeSetting{User: "ctrl"}},
		{map[string]string{Mode: "log", ModesBy: "mode=ctrl:" + logDigest + ":" + enforce}, ModeSetting{User: "ctrl", Prior: "enforce", HadPrior: true}},
		{map[string]string{ModesBy: "mode=ctrl:-:" + enforce}, ModeSetting{User: "ctrl", Prior: "enforce", HadPrior: true}},
		{map[string]string{Mode: "enforce", ModesBy: "mode=ctrl:" + logDigest}, ModeSetting{}},
		{map[string]string{ModesBy: "mode=ctrl:" + logDigest}, ModeSetting{}},
		{map[string]string{Mode: "log", ModesBy: "allowance-mode=ctrl:" + logDigest}, ModeSetting{}},
		{map[string]string{Mode: "log", ModesBy: "mode=:" + logDigest}, ModeSetting{}},
		{map[string]string{Mode: "log", ModesBy: "mode=ctrl:" + logDigest + ":!!"}, ModeSetting{}},
		{map[string]string{Mode: "log", ModesBy: "garbage"}, ModeSetting{}},
		{map[string]string{Mode: "log"}, ModeSetting{}},
	}
	for _, tc := range tests {
		if got := ModeSetBy(tc.ann, Mode); got != tc.want {
			t.Errorf("ModeSetBy(%v) = %+v, want %+v", tc.ann, got, tc.want)
		}
	}
}

func TestModesOf(t *testing.T) {
	if got := ModesOf(map[string]string{"team": "web"}); got != nil {
		t.Errorf("ModesOf without modes = %v, want nil", got)
	}
	got := ModesOf(map[string]string{"team": "web", Mode: "log", ModesBy: "mode=a:b", Approvals: "[]"})
	if len(got) != 2 || got[Mode] != "log" || got[ModesBy] != "mode=a:b" {
		t.Errorf("ModesOf = %v", got)
	}
}
