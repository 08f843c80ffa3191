package decisionlog

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
)

// fieldPlan writes a struct as zap fields: one entry per logged field, in
// the struct's order. It is read from the struct's tags once, so that the
// field names and the conditions on them are written down only in the
// struct, and encoding a value costs no tag parsing.
type fieldPlan struct {
	fields []plannedField
	// gates are the indexes of the fields other fields' conditions name.
	// Each is read once per value, not once per field it gates: the line
	// is written on every intercepted write.
	gates []int
}

type plannedField struct {
	index int
	name  string
	kind  fieldKind
	// gate is the position in fieldPlan.gates of the field that must be
	// set for this one to be written, or -1.
	gate      int
	omitEmpty bool
}

// maxGates bounds how many distinct fields conditions may name, so that
// their values fit a bit set.
const maxGates = 64

type fieldKind uint8

const (
	stringField fieldKind = iota
	boolField
	intField
	durationField
	stringsField
)

var durationType = reflect.TypeFor[time.Duration]()

// planFields reads the plan of a struct type: the name from each field's
// json tag, the condition from its log tag ("omitempty", "if=OtherField").
// A json "-" field is left out of the log unless its log tag names it
// ("name=..."): a field readers cannot decode, but the log still writes.
func planFields(t reflect.Type) (fieldPlan, error) {
	if t.Kind() != reflect.Struct {
		return fieldPlan{}, fmt.Errorf("%s is not a struct", t)
	}
	var plan fieldPlan
	for i := range t.NumField() {
		sf := t.Field(i)
		f := plannedField{index: i, gate: -1}
		if err := f.readTags(t, sf, &plan.gates); err != nil {
			return fieldPlan{}, fmt.Errorf("%s.%s: %w", t, sf.Name, err)
		}
		if f.name == "" {
			continue
		}
		kind, err := kindOf(sf.Type)
		if err != nil {
			return fieldPlan{}, fmt.Errorf("%s.%s: %w", t, sf.Name, err)
		}
		f.kind = kind
		plan.fields = append(plan.fields, f)
	}
	return plan, nil
}

func mustPlanFields(t reflect.Type) fieldPlan {
	plan, err := planFields(t)
	if err != nil {
		panic(err)
	}
	return plan
}

func kindOf(t reflect.Type) (fieldKind, error) {
	switch {
	case t == durationType:
		return durationField, nil
	case t.Kind() == reflect.String:
		return stringField, nil
	case t.Kind() == reflect.Bool:
		return boolField, nil
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		return intField, nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return stringsField, nil
	}
	return 0, fmt.Errorf("the log writes no %s", t)
}

// readTags fills the field's name and condition; a field the log leaves
// out keeps an empty name.
func (f *plannedField) readTags(t reflect.Type, sf reflect.StructField, gates *[]int) error {
	jsonName, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
	tag, tagged := sf.Tag.Lookup("log")
	if jsonName == "" {
		return fmt.Errorf("it has no json name")
	}
	if jsonName != "-" {
		f.name = jsonName
	}
	if !tagged {
		return nil
	}
	for opt := range strings.SplitSeq(tag, ",") {
		gate, isGate := strings.CutPrefix(opt, "if=")
		name, isName := strings.CutPrefix(opt, "name=")
		switch {
		case opt == "omitempty":
			f.omitEmpty = true
		case isName && jsonName == "-" && name != "":
			f.name = name
		case isName:
			return fmt.Errorf("a log name is for a json \"-\" field only; this one is named %q by its json tag", jsonName)
		case isGate:
			gf, ok := t.FieldByName(gate)
			if !ok || len(gf.Index) != 1 {
				return fmt.Errorf("its condition names %q, which is no field of %s", gate, t)
			}
			if k := gf.Type.Kind(); k != reflect.Bool && k != reflect.String {
				return fmt.Errorf("its condition %q is a %s, not a bool or a string", gate, gf.Type)
			}
			f.gate = slices.Index(*gates, gf.Index[0])
			if f.gate < 0 {
				if len(*gates) == maxGates {
					return fmt.Errorf("conditions name more than %d fields", maxGates)
				}
				f.gate = len(*gates)
				*gates = append(*gates, gf.Index[0])
			}
		default:
			return fmt.Errorf("unknown log tag option %q", opt)
		}
	}
	if f.name == "" {
		return fmt.Errorf("json leaves it out, so its log tag must name it (name=...)")
	}
	return nil
}

// marshal writes v, a value of the planned struct type, field by field.
func (p *fieldPlan) marshal(enc zapcore.ObjectEncoder, v reflect.Value) {
	var open uint64
	for i, g := range p.gates {
		if !v.Field(g).IsZero() {
			open |= 1 << i
		}
	}
	for i := range p.fields {
		f := &p.fields[i]
		if f.gate >= 0 && open&(1<<f.gate) == 0 {
			continue
		}
		fv := v.Field(f.index)
		switch f.kind {
		case stringField:
			if s := fv.String(); s != "" || !f.omitEmpty {
				enc.AddString(f.name, s)
			}
		case boolField:
			if b := fv.Bool(); b || !f.omitEmpty {
				enc.AddBool(f.name, b)
			}
		case intField:
			if n := fv.Int(); n != 0 || !f.omitEmpty {
				enc.AddInt64(f.name, n)
			}
		case durationField:
			if d := fv.Int(); d != 0 || !f.omitEmpty {
				enc.AddDuration(f.name, time.Duration(d))
			}
		case stringsField:
			if fv.Len() > 0 || !f.omitEmpty {
				// A pointer into the value, not a copy of the slice header,
				// so that handing it to the encoder does not allocate.
				_ = enc.AddArray(f.name, (*stringArray)(fv.Addr().UnsafePointer()))
			}
		}
	}
}

type stringArray []string

func (a *stringArray) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, s := range *a {
		enc.AppendString(s)
	}
	return nil
}
