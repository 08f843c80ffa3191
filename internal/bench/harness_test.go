package main

import (
	"reflect"
	"testing"
)

// A size added to RunConfig without a row in sizes would run as zero: no
// requests, an empty table row.
func TestEveryRunSizeIsSet(t *testing.T) {
	for _, quick := range []bool{false, true} {
		rc := reflect.ValueOf(newRunConfig(quick))
		for i := range rc.NumField() {
			if f := rc.Field(i); f.Kind() == reflect.Int && f.Int() <= 0 {
				t.Errorf("quick=%v: %s is %d", quick, rc.Type().Field(i).Name, f.Int())
			}
		}
	}
	full, quick := newRunConfig(false), newRunConfig(true)
	if full.GetN != 1000 || quick.GetN != 40 || full.WriteLoadPerRound != 300 || quick.WriteLoadPerRound != 16 {
		t.Errorf("the first and last rows are not read as full and quick: %+v %+v", full, quick)
	}
}
