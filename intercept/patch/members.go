package patch

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// member is one member of a JSON object, by offsets into its text: the
// opening quote of its name, the start of its value, and the end of its
// value.
type member struct {
	name                   string
	start, valueStart, end int
}

// objectMembers calls fn with the name of each member of data, in order,
// until fn returns false, and reports whether data is a JSON object. A
// patch is decoded whole once, where it is applied; asking what its top
// level names must not decode it again, nor copy its values.
//
// Names are compared as kube-apiserver reads them: case-sensitively, and
// with escapes resolved.
func objectMembers(data []byte, fn func(name string) bool) bool {
	if !json.Valid(data) {
		return false
	}
	return eachMember(data, func(m member) bool { return fn(m.name) })
}

// eachMember calls fn with each member of data, a JSON object, in order,
// until fn returns false. It reports whether data is a JSON object; data
// must be valid JSON (checked, or decoded before), or what it reports
// means nothing.
func eachMember(data []byte, fn func(member) bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return true
	}
	for i < len(data) && data[i] == '"' {
		m := member{start: i}
		nameEnd := stringEnd(data, i)
		m.name = memberName(data[i : nameEnd+1])
		i = skipSpace(data, nameEnd+1)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		m.valueStart = skipSpace(data, i+1)
		m.end = valueEnd(data, m.valueStart)
		if !fn(m) {
			return true
		}
		i = skipSpace(data, m.end)
		if i >= len(data) || data[i] != ',' {
			break
		}
		i = skipSpace(data, i+1)
	}
	return i < len(data) && data[i] == '}'
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// valueEnd is the offset just after the JSON value that starts at start.
func valueEnd(data []byte, start int) int {
	if start >= len(data) {
		return len(data)
	}
	switch data[start] {
	case '"':
		return stringEnd(data, start) + 1
	case '{', '[':
		depth := 0
		for i := start; i < len(data); i++ {
			switch data[i] {
			case '"':
				i = stringEnd(data, i)
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(data)
	}
	for i := start; i < len(data); i++ {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
	}
	return len(data)
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
	if len(quoted) < 2 {
		return ""
	}
	if bytes.IndexByte(quoted, '\\') < 0 && utf8.Valid(quoted) {
		return string(quoted[1 : len(quoted)-1])
	}
	var name string
	_ = json.Unmarshal(quoted, &name)
	return name
}
