package objects

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// A parent's protobuf is made lean without decoding it, as a child's
// metadata is (childwatch.go): every field copied as it is, but the
// managedFields entries that LeanParent drops, and the fieldsV1 of those
// it keeps. Decoding a Deployment into its Go type and encoding the lean
// object again was most of the CPU of a parent's event that changes
// nothing settledness reads (a label); the object is decoded only when
// it is read.

// leanProtobuf is a parent's object made lean from its protobuf, and what
// was read of it on the way.
type leanProtobuf struct {
	// object is the lean object's protobuf.
	object                                []byte
	namespace, name, uid, resourceVersion string
	generation                            int64
	// annotations, when asked for (a bookmark's).
	annotations map[string]string
	// statusKey stands for everything settledness reads of the object
	// but its spec's content, which its generation stands for:
	// generation, deletion, annotations, and every field but the
	// metadata (spec and status), as they are encoded. kube-apiserver
	// encodes an object's maps in key order, so one content is one
	// encoding.
	statusKey string
}

// leanParentProtobuf makes the protobuf of an object lean, as LeanParent
// makes the object lean. object is not kept.
func leanParentProtobuf(object []byte, withAnnotations bool) (*leanProtobuf, error) {
	var meta []byte
	var rest [][]byte
	err := walkFields(object, func(num protowire.Number, typ protowire.Type, field, value []byte) error {
		if num == objectMetadata {
			if typ != protowire.BytesType {
				return fmt.Errorf("field %d of the object is not its metadata", num)
			}
			meta, _ = protowire.ConsumeBytes(value)
			return nil
		}
		rest = append(rest, field)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := &leanProtobuf{}
	lean := make([]byte, 0, len(meta))
	var deletion, annotations []byte
	err = walkFields(meta, func(num protowire.Number, typ protowire.Type, field, value []byte) error {
		switch num {
		case objectMetaManagedFields:
			kept, err := leanManagedFieldsEntry(value)
			if err != nil {
				return err
			}
			lean = append(lean, kept...)
			return nil
		case objectMetaName, objectMetaNamespace, objectMetaUID, objectMetaVersion:
			s, err := metadataString(num, typ, value)
			if err != nil {
				return err
			}
			switch num {
			case objectMetaName:
				out.name = s
			case objectMetaNamespace:
				out.namespace = s
			case objectMetaUID:
				out.uid = s
			default:
				out.resourceVersion = s
			}
		case objectMetaGeneration:
			if typ != protowire.VarintType {
				return fmt.Errorf("field %d of the metadata is not a number", num)
			}
			v, _ := protowire.ConsumeVarint(value)
			out.generation = int64(v) //nolint:gosec // protobuf's int64 is a varint of its bits
		case objectMetaDeletionTimestamp:
			deletion = field
		case objectMetaAnnotations:
			annotations = append(annotations, field...)
			if withAnnotations {
				if err := addMapEntry(&out.annotations, typ, value); err != nil {
					return err
				}
			}
		}
		lean = append(lean, field...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the metadata: %w", err)
	}
	size := protowire.SizeTag(objectMetadata) + protowire.SizeBytes(len(lean))
	for _, f := range rest {
		size += len(f)
	}
	out.object = make([]byte, 0, size)
	out.object = protowire.AppendTag(out.object, objectMetadata, protowire.BytesType)
	out.object = protowire.AppendBytes(out.object, lean)
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(out.generation))) //nolint:gosec // the bits, not the number
	h.Write(deletion)
	h.Write([]byte{0})
	h.Write(annotations)
	h.Write([]byte{0xff})
	for _, f := range rest {
		out.object = append(out.object, f...)
		h.Write(f)
	}
	out.statusKey = string(h.Sum(nil))
	return out, nil
}

// leanManagedFieldsEntry is what LeanParent leaves of the managedFields
// entry whose value is value, as a field of the metadata: nothing, unless
// it owns status.observedGeneration; then the entry with only that field
// in its fieldsV1.
func leanManagedFieldsEntry(value []byte) ([]byte, error) {
	entry, n := protowire.ConsumeBytes(value)
	if n < 0 {
		return nil, protowire.ParseError(n)
	}
	fields, err := bytesField(entry, managedFieldsEntryFieldsV1)
	if err != nil {
		return nil, err
	}
	raw, err := bytesField(fields, fieldsV1Raw)
	if err != nil {
		return nil, err
	}
	if raw == nil || !ownsObservedGeneration(raw) {
		return nil, nil
	}
	lean := make([]byte, 0, len(entry))
	err = walkFields(entry, func(num protowire.Number, _ protowire.Type, f, _ []byte) error {
		if num != managedFieldsEntryFieldsV1 {
			lean = append(lean, f...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var leanFields []byte
	leanFields = protowire.AppendTag(leanFields, fieldsV1Raw, protowire.BytesType)
	leanFields = protowire.AppendBytes(leanFields, observedGenerationOwned)
	lean = protowire.AppendTag(lean, managedFieldsEntryFieldsV1, protowire.BytesType)
	lean = protowire.AppendBytes(lean, leanFields)
	kept := protowire.AppendTag(nil, objectMetaManagedFields, protowire.BytesType)
	return protowire.AppendBytes(kept, lean), nil
}

// addMapEntry adds the entry of a map<string, string> field to m.
func addMapEntry(m *map[string]string, typ protowire.Type, value []byte) error {
	if typ != protowire.BytesType {
		return errors.New("a map entry is not a message")
	}
	entry, _ := protowire.ConsumeBytes(value)
	key, err := bytesField(entry, mapEntryKey)
	if err != nil {
		return err
	}
	v, err := bytesField(entry, mapEntryValue)
	if err != nil {
		return err
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[string(key)] = string(v)
	return nil
}
