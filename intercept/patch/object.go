package patch

import (
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
	// unset reports whether the object's value counts as none.
	unset func(string) bool
}

// metadataMembers are the members of an object's metadata, and where
// the ones AnnotateObject writes are among them (-1: absent).
type metadataMembers struct {
	members     []member
	annotations int
	fills       [2]filled
}

// annotateMetadata is metadata, a JSON object, with meta written into it.
func annotateMetadata(metadata []byte, meta ObjectMetadata) (out []byte, rvAdded, ok bool) {
	m := metadataMembers{annotations: -1, fills: [2]filled{
		{name: "resourceVersion", value: meta.ResourceVersion, at: -1, unset: func(rv string) bool { return !NamesVersion(rv) }},
		{name: "namespace", value: meta.Namespace, at: -1, unset: func(ns string) bool { return ns == "" }},
	}}
	if !m.read(metadata) {
		return nil, false, false
	}
	for i := range m.fills {
		if ok := m.fill(metadata, &m.fills[i]); !ok {
			return nil, false, false
		}
	}
	annotations, ok := m.annotated(metadata, meta.Annotations)
	if !ok {
		return nil, false, false
	}
	return m.write(metadata, annotations), m.fills[0].write, true
}

// read finds the members of metadata; false when it is no object, or
// names a member AnnotateObject writes twice.
func (m *metadataMembers) read(metadata []byte) bool {
	twice := false
	isObject := eachMember(metadata, func(mb member) bool {
		if mb.name == "annotations" {
			twice = twice || m.annotations >= 0
			m.annotations = len(m.members)
		}
		for i := range m.fills {
			if mb.name == m.fills[i].name {
				twice = twice || m.fills[i].at >= 0
				m.fills[i].at = len(m.members)
			}
		}
		m.members = append(m.members, mb)
		return true
	})
	return isObject && !twice
}

// fill decides whether f is written: it has a value and the object's
// counts as none. False when the object's is no string.
func (m *metadataMembers) fill(metadata []byte, f *filled) bool {
	if f.value == "" {
		return true
	}
	current := ""
	if f.at >= 0 {
		mb := m.members[f.at]
		var value *string
		if err := utiljson.Unmarshal(metadata[mb.valueStart:mb.end], &value); err != nil {
			return false
		}
		if value != nil {
			current = *value
		}
	}
	f.write = f.unset(current)
	return true
}

// annotated is the object's annotations with changes made, or nil when
// there are no changes. False when they are neither null nor an object
// of strings.
func (m *metadataMembers) annotated(metadata []byte, changes map[string]*string) (map[string]string, bool) {
	if len(changes) == 0 {
		return nil, true
	}
	stored := map[string]string{}
	if m.annotations >= 0 {
		mb := m.members[m.annotations]
		if err := utiljson.Unmarshal(metadata[mb.valueStart:mb.end], &stored); err != nil {
			return nil, false
		}
	}
	if stored == nil {
		stored = map[string]string{}
	}
	for k, v := range changes {
		if v == nil {
			delete(stored, k)
		} else {
			stored[k] = *v
		}
	}
	return stored, true
}

// write is the metadata object: the members as they came but the ones
// written anew, then those that were absent.
func (m *metadataMembers) write(metadata []byte, annotations map[string]string) []byte {
	out := make([]byte, 0, len(metadata)+len(m.fills[0].value)+len(m.fills[1].value)+64+32*len(annotations))
	out = append(out, '{')
	next := func(name string) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(appendJSONString(out, name), ':')
	}
	for i, mb := range m.members {
		switch {
		case i == m.annotations && annotations != nil:
			if len(annotations) > 0 {
				next("annotations")
				out = appendStringObject(out, annotations)
			}
		case i == m.fills[0].at && m.fills[0].write:
			next(m.fills[0].name)
			out = appendJSONString(out, m.fills[0].value)
		case i == m.fills[1].at && m.fills[1].write:
			next(m.fills[1].name)
			out = appendJSONString(out, m.fills[1].value)
		default:
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, metadata[mb.start:mb.end]...)
		}
	}
	if m.annotations < 0 && len(annotations) > 0 {
		next("annotations")
		out = appendStringObject(out, annotations)
	}
	for _, f := range m.fills {
		if f.at < 0 && f.write {
			next(f.name)
			out = appendJSONString(out, f.value)
		}
	}
	return append(out, '}')
}

// appendStringObject appends m as a JSON object, its keys sorted, as
// json.Marshal encodes it.
func appendStringObject(dst []byte, m map[string]string) []byte {
	return appendSortedObject(dst, m, appendJSONString)
}
