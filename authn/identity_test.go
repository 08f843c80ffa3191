package authn

import (
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

func TestValidateIdentity(t *testing.T) {
	cases := []struct {
		name    string
		user    user.Info
		wantErr string
	}{
		{name: "plain", user: &user.DefaultInfo{Name: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"}, Extra: map[string][]string{"scopes": {"a b"}}}},
		{name: "inner spaces are fine", user: &user.DefaultInfo{Name: "Alice Smith", Groups: []string{"team a"}}},
		{name: "service account", user: &user.DefaultInfo{Name: "system:serviceaccount:ns:sa"}},
		{name: "no user", user: nil, wantErr: "no user"},
		{name: "empty name", user: &user.DefaultInfo{}, wantErr: "user name is empty"},
		{name: "leading space in a group", user: &user.DefaultInfo{Name: "alice", Groups: []string{" system:masters"}}, wantErr: "group has leading or trailing white space"},
		{name: "trailing space in the name", user: &user.DefaultInfo{Name: "alice "}, wantErr: "user name has leading or trailing white space"},
		{name: "non-breaking space", user: &user.DefaultInfo{Name: "alice\u00a0"}, wantErr: "leading or trailing white space"},
		{name: "tab inside", user: &user.DefaultInfo{Name: "al\tice"}, wantErr: "control character"},
		{name: "CR LF in a group", user: &user.DefaultInfo{Name: "alice", Groups: []string{"devs\r\nImpersonate-Group: system:masters"}}, wantErr: "group contains a control character"},
		{name: "NUL in the uid", user: &user.DefaultInfo{Name: "alice", UID: "u\x00"}, wantErr: "uid contains a control character"},
		{name: "DEL in an extra value", user: &user.DefaultInfo{Name: "alice", Extra: map[string][]string{"k": {"v\x7f"}}}, wantErr: `extra "k" value contains a control character`},
		{name: "space around an extra key", user: &user.DefaultInfo{Name: "alice", Extra: map[string][]string{" k": {"v"}}}, wantErr: "extra key has leading or trailing white space"},
		{name: "invalid UTF-8", user: &user.DefaultInfo{Name: "alice\xff"}, wantErr: "not valid UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateIdentity(tc.user)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
			}
			if err != nil && tc.user != nil && strings.Contains(err.Error(), "system:masters") {
				t.Fatalf("the error echoes the value: %v", err)
			}
		})
	}
}
