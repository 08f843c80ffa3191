package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestShadowReportCommand(t *testing.T) {
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetIn(strings.NewReader(`{"msg":"kausality decision","controller":"dc","shadow":true,"wouldDeny":true,"decision":"Deny","category":"Frozen","parent":"apps/v1 Deployment a/b","namespace":"a","resource":"replicasets","name":"b-1"}` + "\n"))
	cmd.SetArgs([]string{"shadow-report"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "parent apps/v1 Deployment a/b: 1") {
		t.Fatalf("output:\n%s", out.String())
	}
	cmd = newRootCommand()
	cmd.SetArgs([]string{"shadow-report", "--output", "yaml"})
	cmd.SetIn(strings.NewReader(""))
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--output must be text or json") {
		t.Fatalf("error %v", err)
	}
}

func TestInvalidConfigRefusesToStart(t *testing.T) {
	cmd := newRootCommand()
	cmd.SetArgs([]string{"--default-mode", "strict", "--upstream-kubeconfig", "/nonexistent"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), `--default-mode must be log or enforce, not "strict"`) {
		t.Fatalf("error %v", err)
	}
}
