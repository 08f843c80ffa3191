package patch

import (
	"slices"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// ObjectMetadata is what AnnotateObject writes into an object's metadata.
type ObjectMetadata struct {
	// Annotations to set; a nil value removes the annotation.
	Annotations map[string]*string
	// ResourceVersion and Namespace are written when the object names
	// none (and they are not empty).
	ResourceVersion, Namespace string
}

// AnnotateObject writes meta into data, a whole object in JSON as a
// create or update sends it, and reports whether it wrote the
// resourceVersion. Only metadata is written anew; the client's other
// members pass as they came. Decoding the whole object and encoding it
// again would cost more than anything else the proxy does for an update.
//
// data must have decoded as JSON. ok is false for what it does not
// rewrite (an object without its own apiVersion and kind strings and
// metadata object; any of them, or annotations, resourceVersion or namespace,
// named twice; an annotation, resourceVersion or namespace that is no
// string): the caller encodes the decoded object instead.
func AnnotateObject(data []byte, meta ObjectMetadata) (out []byte, rvAdded, ok bool) {
	var metadata member
	seen := map[string]int{}
	isObject := eachMember(data, func(m member) bool {
		switch m.name {
		case "metadata":
			metadata = m
		case "apiVersion", "kind":
			// Decoding fills in an empty one from the request's path.
			if m.end-m.valueStart <= 2 || data[m.valueStart] != '"' {
				seen[m.name] = 2
			}
		default:
			return true
		}
		seen[m.name]++
		return true
	})
	if !isObject || seen["metadata"] != 1 || seen["apiVersion"] != 1 || seen["kind"] != 1 {
		return nil, false, false
	}
	metaData := data[metadata.valueStart:metadata.end]
	newMeta, rvAdded, ok := annotateMetadata(metaData, meta)
	if !ok {
		return nil, false, false
	}
	out = make([]byte, 0, len(data)-len(metaData)+len(newMeta))
	out = append(out, data[:metadata.valueStart]...)
	out = append(out, newMeta...)
	return append(out, data[metadata.end:]...), rvAdded, true
}

// filled is a metadata field written when the object leaves it empty.
type filled struct {
	name, value string
	at          int
	write       bool
}

// annotateMetadata is metadata, a JSON object, with meta written into it.
func annotateMetadata(metadata []byte, meta ObjectMetadata) (out []byte, rvAdded, ok bool) {
	var members []member
	annotations, twice := -1, false
	fills := [2]filled{{name: "resourceVersion", value: meta.ResourceVersion, at: -1}, {name: "namespace", value: meta.Namespace, at: -1}}
	isObject := eachMember(metadata, func(m member) bool {
		if m.name == "annotations" {
			twice = twice || annotations >= 0
			annotations = len(members)
		}
		for i := range fills {
			if m.name == fills[i].name {
				twice = twice || fills[i].at >= 0
				fills[i].at = len(members)
			}
		}
		members = append(members, m)
		return true
	})
	if !isObject || twice {
		return nil, false, false
	}
	for i := range fills {
		f := &fills[i]
		if f.value == "" {
			continue
		}
		current := ""
		if f.at >= 0 {
			m := members[f.at]
			var value *string
			if err := utiljson.Unmarshal(metadata[m.valueStart:m.end], &value); err != nil {
				return nil, false, false
			}
			if value != nil {
				current = *value
			}
		}
		f.write = current == ""
	}
	var stored map[string]string
	if len(meta.Annotations) > 0 {
		stored = map[string]string{}
		if annotations >= 0 {
			m := members[annotations]
			// null, or an object of strings; anything else is left to
			// decoding.
			if err := utiljson.Unmarshal(metadata[m.valueStart:m.end], &stored); err != nil {
				return nil, false, false
			}
			if stored == nil {
				stored = map[string]string{}
			}
		}
		for k, v := range meta.Annotations {
			if v == nil {
				delete(stored, k)
			} else {
				stored[k] = *v
			}
		}
	}

	out = make([]byte, 0, len(metadata)+len(meta.ResourceVersion)+len(meta.Namespace)+64+32*len(stored))
	out = append(out, '{')
	next := func(name string) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(appendJSONString(out, name), ':')
	}
	for i, m := range members {
		switch {
		case i == annotations && stored != nil:
			if len(stored) > 0 {
				next("annotations")
				out = appendStringObject(out, stored)
			}
		case i == fills[0].at && fills[0].write:
			next(fills[0].name)
			out = appendJSONString(out, fills[0].value)
		case i == fills[1].at && fills[1].write:
			next(fills[1].name)
			out = appendJSONString(out, fills[1].value)
		default:
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, metadata[m.start:m.end]...)
		}
	}
	if annotations < 0 && len(stored) > 0 {
		next("annotations")
		out = appendStringObject(out, stored)
	}
	for _, f := range fills {
		if f.at < 0 && f.write {
			next(f.name)
			out = appendJSONString(out, f.value)
		}
	}
	return append(out, '}'), fills[0].write, true
}

// appendStringObject appends m as a JSON object, its keys sorted, as
// json.Marshal encodes it.
func appendStringObject(dst []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, m[k])
	}
	return append(dst, '}')
}
