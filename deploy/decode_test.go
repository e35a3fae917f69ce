package deploy

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"sigs.k8s.io/yaml"
)

// typeMeta is the part of every manifest document that names its type.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// newObject returns an empty value of the Kubernetes type a document
// names, or an error for a type these tests do not know, so that a typo in
// apiVersion or kind fails instead of passing undecoded.
func newObject(tm typeMeta) (any, error) {
	switch tm.APIVersion + "/" + tm.Kind {
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1/DaemonSet":
		return &appsv1.DaemonSet{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Namespace":
		return &corev1.Namespace{}, nil
	case "scheduling.k8s.io/v1/PriorityClass":
		return &schedulingv1.PriorityClass{}, nil
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		return &rbacv1.ClusterRole{}, nil
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}, nil
	}
	return nil, fmt.Errorf("unknown manifest type %s %s", tm.APIVersion, tm.Kind)
}

// decodeManifests reads a multi-document YAML file and decodes every
// document strictly (an unknown or misspelled field is an error) into the
// type its apiVersion and kind name.
func decodeManifests(t *testing.T, path string) []any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []any
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var tm typeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		obj, err := newObject(tm)
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s: document %d (%s): %v", path, i, tm.Kind, err)
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		t.Fatalf("%s: no manifests", path)
	}
	return objs
}

// stripComments drops YAML comment lines, so that a document of comments
// alone counts as empty.
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// objectsOf returns the decoded objects of type T.
func objectsOf[T any](objs []any) []*T {
	var out []*T
	for _, o := range objs {
		if v, ok := o.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestDecodeRejectsUnknownFields(t *testing.T) {
	bad := "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {portz: []}\n"
	obj, _ := newObject(typeMeta{APIVersion: "v1", Kind: "Service"})
	if err := yaml.UnmarshalStrict([]byte(bad), obj); err == nil {
		t.Fatal("strict decoding accepted an unknown field")
	}
}
