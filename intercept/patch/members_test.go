package patch

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// objectMembers must name exactly the keys json.Unmarshal finds at the
// top level of an object, and accept exactly the objects it decodes.
func TestObjectMembers(t *testing.T) {
	for _, data := range []string{
		`{}`, ` { } `, `{"spec":{"replicas":3}}`, `{"a":1,"b":[1,{"c":2}],"d":"}"}`,
		`{"metadata":{"labels":{"a":"b"}},"spec":{"metadata":1}}`,
		`{"m\u0065tadata":1}`, `{"a\"b":{"x":"\"}"},"c\\":"\\"}`, `{"Metadata":1,"metadata":null}`,
		`{"a":[{"b":"]"},{"c":"["}],"d":{"e":{"f":{}}}}`, "{\n\t\"a\" : 1 ,\r\n \"b\":2}",
		`{"a":1,"a":2}`, `{"\u00e9t\u00e9":true}`,
		`[]`, `[{"a":1}]`, `null`, `"x"`, `1`, ``, `{`, `{"a":}`, `{"a":1}x`, `{"a":1,}`,
	} {
		var top map[string]json.RawMessage
		decoded := json.Unmarshal([]byte(data), &top) == nil && top != nil
		var names []string
		isObject := objectMembers([]byte(data), func(name string) bool {
			names = append(names, name)
			return true
		})
		if isObject != decoded {
			t.Errorf("%s: object %v, json.Unmarshal decodes an object: %v", data, isObject, decoded)
			continue
		}
		want := slices.Sorted(maps.Keys(top))
		if got := slices.Compact(slices.Sorted(slices.Values(names))); !slices.Equal(got, want) {
			t.Errorf("%s: names %q, want %q", data, got, want)
		}
	}
}

func FuzzObjectMembers(f *testing.F) {
	f.Add(`{"spec":{"replicas":3},"m\u0065tadata":{"a":"}"}}`)
	f.Add(`[{"a":1}]`)
	f.Fuzz(func(t *testing.T, data string) {
		var top map[string]json.RawMessage
		decoded := json.Unmarshal([]byte(data), &top) == nil && top != nil
		names := map[string]bool{}
		isObject := objectMembers([]byte(data), func(name string) bool {
			names[name] = true
			return true
		})
		if isObject != decoded {
			t.Fatalf("%q: object %v, json.Unmarshal decodes an object: %v", data, isObject, decoded)
		}
		for k := range top {
			if !names[k] {
				t.Fatalf("%q: %q not named", data, k)
			}
		}
		if len(names) != len(top) {
			t.Fatalf("%q: names %v, keys %d", data, names, len(top))
		}
	})
}
