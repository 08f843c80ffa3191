package shadowreport

import (
	"bytes"
	"strings"
	"testing"
)

const logSample = `{"level":"info","msg":"kausality decision","controller":"deployment-controller","user":"system:serviceaccount:kube-system:deployment-controller","shadow":true,"wouldDeny":true,"decision":"Deny","category":"DriftUnapproved","drift":true,"parent":"apps/v1 Deployment prod/web","namespace":"prod","resource":"replicasets","name":"web-1"}
{"level":"info","msg":"kausality decision","controller":"deployment-controller","shadow":true,"wouldDeny":true,"decision":"Deny","category":"DriftUnapproved","drift":true,"parent":"apps/v1 Deployment prod/web","namespace":"prod","resource":"replicasets","name":"web-1"}
{"level":"info","msg":"kausality decision","controller":"deployment-controller","shadow":true,"decision":"Deny","category":"Frozen","parent":"apps/v1 Deployment prod/api","namespace":"prod","resource":"replicasets","name":"api-1"}
{"level":"info","msg":"kausality decision","controller":"deployment-controller","shadow":true,"decision":"Allow","category":"Expected","parent":"apps/v1 Deployment prod/api","namespace":"prod","resource":"replicasets","name":"api-1"}
{"level":"info","msg":"kausality decision","controller":"deployment-controller","shadow":true,"decision":"Allow","category":"DriftUnapproved","drift":true,"namespace":"dev","resource":"replicasets","name":"x"}
{"level":"info","msg":"kausality decision","controller":"statefulset-controller","shadow":true,"decision":"Allow","category":"Expected","namespace":"prod","resource":"pods","name":"db-0"}
{"level":"info","msg":"kausality decision","controller":"replicaset-controller","shadow":false,"decision":"Deny","category":"DriftUnapproved","namespace":"prod","resource":"pods","name":"p"}
{"level":"info","msg":"kausality decision","user":"helm","shadow":true,"decision":"Error","namespace":"prod","resource":"configmaps","name":"c"}
{"level":"info","msg":"upstream kube-apiserver is ready"}
not json at all
`

func TestRead(t *testing.T) {
	rep, err := Read(strings.NewReader(logSample))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != 8 || rep.Skipped != 2 {
		t.Fatalf("lines %d skipped %d", rep.Lines, rep.Skipped)
	}
	if len(rep.Controllers) != 3 {
		t.Fatalf("controllers %+v", rep.Controllers)
	}
	dc := rep.Controllers[0]
	if dc.Name != "deployment-controller" || dc.Writes != 5 || dc.WouldDeny != 3 || dc.WouldWarn != 1 || dc.Errors != 0 {
		t.Fatalf("deployment-controller %+v", dc)
	}
	if dc.Parents["apps/v1 Deployment prod/web"] != 2 || dc.Parents["apps/v1 Deployment prod/api"] != 1 {
		t.Fatalf("parents %v", dc.Parents)
	}
	if dc.Categories["DriftUnapproved"] != 2 || dc.Categories["Frozen"] != 1 {
		t.Fatalf("categories %v", dc.Categories)
	}
	// Not-shadowed lines (replicaset-controller) do not count; a line
	// without a controller name is grouped by user.
	names := []string{rep.Controllers[1].Name, rep.Controllers[2].Name}
	if names[0] != "helm" || names[1] != "statefulset-controller" || rep.Controllers[1].Errors != 1 {
		t.Fatalf("order/names %v", names)
	}

	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"deployment-controller   5       3           1           0       would block writes: review the parents below",
		"statefulset-controller  1       0           0           0       ready for enforce",
		"parent apps/v1 Deployment prod/web: 2",
		"reason Frozen: 1",
		"e.g. replicasets prod/web-1 (DriftUnapproved)",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"wouldDeny": 3`) {
		t.Fatalf("json %v: %s", err, js.String())
	}
}

func TestReadNoShadow(t *testing.T) {
	rep, err := Read(strings.NewReader(`{"msg":"kausality decision","shadow":false,"decision":"Allow"}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	if !strings.Contains(text.String(), "No shadow-mode decisions in 1 decision lines") {
		t.Fatal(text.String())
	}
}
