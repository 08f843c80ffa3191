package patch

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// objectMembers calls member with the name of each member of data, in
// order, until member returns false, and reports whether data is a JSON
// object. A patch is decoded whole once, where it is applied; asking what
// its top level names must not decode it again, nor copy its values.
//
// Names are compared as kube-apiserver reads them: case-sensitively, and
// with escapes resolved.
func objectMembers(data []byte, member func(name string) bool) bool {
	if !json.Valid(data) {
		return false
	}
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	// data is valid JSON: outside strings, a member's name is the first
	// string at depth one after the opening brace or a comma.
	depth, expectName := 0, true
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			expectName = depth == 1
		case '"':
			end := stringEnd(data, i)
			if depth == 1 && expectName {
				if !member(memberName(data[i : end+1])) {
					return true
				}
				expectName = false
			}
			i = end
		}
	}
	return true
}

// stringEnd is the index of the quote that closes the string opening at
// start.
func stringEnd(data []byte, start int) int {
	for i := start + 1; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(data) - 1
}

// memberName is the name a quoted JSON string stands for: escapes
// resolved, invalid UTF-8 replaced as decoding does.
func memberName(quoted []byte) string {
	if bytes.IndexByte(quoted, '\\') < 0 && utf8.Valid(quoted) {
		return string(quoted[1 : len(quoted)-1])
	}
	var name string
	_ = json.Unmarshal(quoted, &name)
	return name
}
