package objects

import "google.golang.org/protobuf/encoding/protowire"

// The fields the watches of children and of built-in parents read and
// copy without decoding an object (childwatch.go, parentprotobuf.go).
// Numbers are those of generated.proto of k8s.io/apimachinery's meta/v1
// and runtime packages.
const (
	objectMetaName              protowire.Number = 1
	objectMetaNamespace         protowire.Number = 3
	objectMetaUID               protowire.Number = 5
	objectMetaVersion           protowire.Number = 6
	objectMetaGeneration        protowire.Number = 7
	objectMetaDeletionTimestamp protowire.Number = 9
	objectMetaLabels            protowire.Number = 11
	objectMetaAnnotations       protowire.Number = 12
	objectMetaManagedFields     protowire.Number = 17

	// Every object's protobuf, PartialObjectMetadata's included, holds its
	// ObjectMeta in field 1.
	objectMetadata protowire.Number = 1

	managedFieldsEntryFieldsV1 protowire.Number = 7
	fieldsV1Raw                protowire.Number = 1

	mapEntryKey   protowire.Number = 1
	mapEntryValue protowire.Number = 2

	watchEventType   protowire.Number = 1
	watchEventObject protowire.Number = 2
	rawExtensionRaw  protowire.Number = 1

	unknownTypeMeta        protowire.Number = 1
	unknownRaw             protowire.Number = 2
	unknownContentEncoding protowire.Number = 3
	typeMetaAPIVersion     protowire.Number = 1
	typeMetaKind           protowire.Number = 2
)
