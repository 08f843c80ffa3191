package kubectlplugin

import (
	"fmt"
	"reflect"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// printf formats like fmt.Sprintf, with every argument that is text escaped
// by annotations.Printable. Names, user names, paths, values and reasons
// come from records and annotations others wrote: escaped one by one, they
// can neither make a terminal act (escape sequences) nor add a line or a
// column of their own (a newline or a tab in a value), so what is shown
// has only the lines and columns of the format.
func printf(format string, args ...any) string {
	return fmt.Sprintf(format, printableArgs(args)...)
}

func printableArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			out[i] = a
		case error:
			out[i] = annotations.Printable(v.Error())
		case fmt.Stringer:
			out[i] = annotations.Printable(v.String())
		case []byte:
			out[i] = annotations.Printable(string(v))
		default:
			// Named string and byte-slice types too: json.RawMessage
			// holds an annotation's JSON as written, line breaks and all.
			switch rv := reflect.ValueOf(a); {
			case rv.Kind() == reflect.String:
				out[i] = annotations.Printable(rv.String())
			case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
				out[i] = annotations.Printable(string(rv.Bytes()))
			default:
				out[i] = a
			}
		}
	}
	return out
}
