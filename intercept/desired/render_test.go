package desired

import (
	"encoding/json"
	"strings"
	"testing"
)

// Render writes what json.Marshal writes, whatever the value: the plain
// strings and integers written directly must not read differently from
// the ones that go through the encoder.
func TestRenderIsJSON(t *testing.T) {
	for _, v := range []interface{}{
		"plain", "", "with \"quotes\"", `back\slash`, "<html> & co", "tab\there", "new\nline", "ünïcödé", "\u2028", string([]byte{0xff, 'a'}),
		int64(0), int64(-42), int64(1) << 62, 1.5, 1e21, 0.000001, true, false, nil,
		map[string]interface{}{"b": int64(1), "a": "x", "<k>": []interface{}{"y", int64(2), false, nil, 3.25}},
	} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		renderJSON(&b, v, 1<<20)
		if b.String() != string(want) {
			t.Errorf("renderJSON(%#v) = %s, json.Marshal: %s", v, b.String(), want)
		}
	}
}
