package patch

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	cbor "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/managedfields"

	"github.com/kausality-io/kausality-proxy/intercept/body"
)

var deducedTypeConverter = managedfields.NewDeducedTypeConverter()

// decodeApplyConfiguration decodes an apply patch body. YAML goes through the
// same converter as kube-apiserver's (sigs.k8s.io/yaml), but a stream with
// more than one document is rejected (see body.YAMLToJSON).
func decodeApplyConfiguration(patchType types.PatchType, patch []byte) (*unstructured.Unstructured, error) {
	if patchType != types.ApplyYAMLPatchType {
		// CBOR decodes fast enough.
		return decodeApplyConfigurationOnce(patchType, patch)
	}
	if cfg, ok := decodedConfigurations.get(patchType, patch); ok {
		return cfg, nil
	}
	cfg, err := decodeApplyConfigurationOnce(patchType, patch)
	if err == nil {
		decodedConfigurations.put(patchType, patch, cfg)
	}
	return cfg, err
}

func decodeApplyConfigurationOnce(patchType types.PatchType, patch []byte) (*unstructured.Unstructured, error) {
	var (
		v      interface{}
		format = "YAML"
	)
	switch patchType {
	case types.ApplyCBORPatchType:
		format = "CBOR"
		if err := cbor.Unmarshal(patch, &v); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding CBOR: %v", err))
		}
	default:
		js, err := body.YAMLToJSON(patch)
		if err != nil {
			var se *apierrors.StatusError
			if errors.As(err, &se) {
				return nil, apierrors.NewBadRequest("error decoding YAML: " + se.ErrStatus.Message)
			}
			return nil, err
		}
		if err := utiljson.Unmarshal(js, &v); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
		}
	}
	obj, ok := v.(map[string]interface{})
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding %s: the apply configuration must be an object, got %s", format, body.Describe(v)))
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

func applyServerSide(patchType types.PatchType, current *unstructured.Unstructured, patch []byte, opts Options) (*unstructured.Unstructured, error) {
	applied, err := decodeApplyConfiguration(patchType, patch)
	if err != nil {
		return nil, err
	}

	kind := opts.Kind
	if kind.Empty() {
		if current != nil {
			kind = current.GroupVersionKind()
		} else {
			kind = applied.GroupVersionKind()
		}
	}
	if kind.Kind == "" || kind.Version == "" {
		// What the apiserver's version check answers for an apply
		// configuration without apiVersion/kind.
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid object type: %v", applied.GroupVersionKind()))
	}

	var live *unstructured.Unstructured
	if current != nil {
		live = current.DeepCopy()
	} else {
		// kube-apiserver starts a create-by-apply from an empty object.
		live = &unstructured.Unstructured{Object: map[string]interface{}{}}
		live.SetGroupVersionKind(kind)
	}

	tc := opts.TypeConverter
	if tc == nil {
		tc = deducedTypeConverter
	}
	defaulter := opts.Defaulter
	if defaulter == nil {
		defaulter = noopDefaulter{}
	}
	fm, err := managedfields.NewDefaultCRDFieldManager(tc, unstructuredConvertor{}, defaulter, unstructuredCreater{}, kind, kind.GroupVersion(), "", nil)
	if err != nil {
		return nil, internalError(err)
	}
	force := opts.Force != nil && *opts.Force
	out, err := fm.Apply(live, applied, opts.FieldManager, force)
	if err != nil {
		var se *apierrors.StatusError
		if errors.As(err, &se) {
			return nil, se // 400 version/kind mismatch, 400 managedFields set, 409 conflicts
		}
		if strings.HasPrefix(err.Error(), "failed to create typed patch object") {
			// kube-apiserver v1.35 answers 500 here (kubernetes/kubernetes#139253);
			// it is the client's apply configuration that does not fit the
			// schema, so we answer 400.
			return nil, apierrors.NewBadRequest(err.Error())
		}
		return nil, internalError(err)
	}
	u, ok := out.(*unstructured.Unstructured)
	if !ok || u == nil {
		return nil, internalError(fmt.Errorf("server-side apply returned %T", out))
	}
	return u, nil
}

type noopDefaulter struct{}

func (noopDefaulter) Default(runtime.Object) {}

// unstructuredCreater creates empty unstructured objects of any kind.
type unstructuredCreater struct{}

func (unstructuredCreater) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{Object: map[string]interface{}{}}
	u.SetGroupVersionKind(kind)
	return u, nil
}

// unstructuredConvertor converts an unstructured object only to its own
// version. The FieldManager uses it to convert managedFields entries of other
// versions; a NotRegistered error makes structured-merge-diff ignore them.
type unstructuredConvertor struct{}

func (unstructuredConvertor) Convert(in, out, context interface{}) error {
	return errors.New("unstructuredConvertor: Convert is not supported")
}

func (unstructuredConvertor) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	kind := in.GetObjectKind().GroupVersionKind()
	if gvk, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{kind}); ok && gvk == kind {
		return in, nil
	}
	return nil, runtime.NewNotRegisteredGVKErrForTarget("kausality-proxy", kind, target)
}

func (unstructuredConvertor) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	return "", "", errors.New("unstructuredConvertor: ConvertFieldLabel is not supported")
}
