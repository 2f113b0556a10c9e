#!/usr/bin/python3
"""Check Kubernetes manifests against the API's schema, offline.

   scripts/check-k8s-manifests.py FILE.yaml...

The schema is the one Debian ships in python3-kubernetes (bookworm: 22.6.0, generated from
Kubernetes 1.22's OpenAPI spec): each model class lists its fields' JSON names (attribute_map)
and types (openapi_types), and its constructor refuses a missing required field. Every document
is walked against that: an unknown field, a value of the wrong type or a missing required field
is an error naming its path. On top, the enums the models leave as plain strings for the fields
we use (k8s.io/api admissionregistration/v1 and core/v1 types.go). Why not kubectl: bookworm's
kubernetes-client (kubectl 1.20) validates only against a live API server's OpenAPI (`--validate`
fetches /openapi/v2), so offline it checks nothing (docs/deploy.md).
Exit 0 when every document is valid; 1 with one line per problem; 77 when python3-kubernetes is
missing (a test skips).
"""
import re
import sys

try:
    import yaml
    import kubernetes.client as k8s
    from kubernetes.client import ApiClient
except ImportError as e:  # pragma: no cover
    print(f"check-k8s-manifests: {e} (Debian: python3-kubernetes, python3-yaml)", file=sys.stderr)
    sys.exit(77)

# Enums the generated models do not check (string fields), for the kinds we deploy.
ENUMS = {
    ("V1MutatingWebhook", "failurePolicy"): {"Ignore", "Fail"},
    ("V1MutatingWebhook", "sideEffects"): {"None", "NoneOnDryRun"},
    ("V1MutatingWebhook", "reinvocationPolicy"): {"Never", "IfNeeded"},
    ("V1MutatingWebhook", "matchPolicy"): {"Exact", "Equivalent"},
    ("V1RuleWithOperations", "scope"): {"Cluster", "Namespaced", "*"},
    ("V1LabelSelectorRequirement", "operator"): {"In", "NotIn", "Exists", "DoesNotExist"},
    ("V1Container", "imagePullPolicy"): {"Always", "IfNotPresent", "Never"},
    ("V1ServicePort", "protocol"): {"TCP", "UDP", "SCTP"},
    ("V1ContainerPort", "protocol"): {"TCP", "UDP", "SCTP"},
    ("V1HTTPGetAction", "scheme"): {"HTTP", "HTTPS"},
    ("V1SeccompProfile", "type"): {"RuntimeDefault", "Unconfined", "Localhost"},
    ("V1Secret", "type"): None,  # free-form
}
OPERATIONS = {"CREATE", "UPDATE", "DELETE", "CONNECT", "*"}


def model_of(api_version, kind):
    group, _, version = api_version.rpartition("/")
    name = version.capitalize() + kind
    return getattr(k8s, name, None), name


def check(value, typ, path, errors):
    if value is None:
        return
    m = re.match(r"list\[(.*)\]$", typ)
    if m:
        if not isinstance(value, list):
            errors.append(f"{path}: a list was expected, not {type(value).__name__}")
            return
        for i, v in enumerate(value):
            check(v, m.group(1), f"{path}[{i}]", errors)
        return
    m = re.match(r"dict\(([^,]*), (.*)\)$", typ)
    if m:
        if not isinstance(value, dict):
            errors.append(f"{path}: a map was expected, not {type(value).__name__}")
            return
        for k, v in value.items():
            check(v, m.group(2), f"{path}.{k}", errors)
        return
    simple = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str, "date": str}
    if typ in simple:
        if isinstance(value, bool) and typ != "bool":
            errors.append(f"{path}: {typ} expected, not a boolean")
        elif not isinstance(value, simple[typ]):
            errors.append(f"{path}: {typ} expected, not {type(value).__name__} ({value!r})")
        return
    if typ == "object":  # IntOrString, RawExtension, quantities
        return
    cls = getattr(k8s, typ, None)
    if cls is None:
        errors.append(f"{path}: schema type {typ} unknown to python3-kubernetes")
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: an object ({typ}) was expected, not {type(value).__name__}")
        return
    json_to_attr = {v: k for k, v in cls.attribute_map.items()}
    for key, v in value.items():
        if key not in json_to_attr:
            errors.append(f"{path}.{key}: no such field in {typ}")
            continue
        check(v, cls.openapi_types[json_to_attr[key]], f"{path}.{key}", errors)
        allowed = ENUMS.get((typ, key))
        if allowed and isinstance(v, str) and v not in allowed:
            errors.append(f"{path}.{key}: '{v}' is not one of {sorted(allowed)}")
    if typ == "V1RuleWithOperations":
        for op in value.get("operations") or []:
            if op not in OPERATIONS:
                errors.append(f"{path}.operations: '{op}' is not one of {sorted(OPERATIONS)}")


def main(files):
    errors = []
    count = 0
    client = ApiClient()
    for f in files:
        with open(f) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d is not None]
        for i, doc in enumerate(docs):
            where = f"{f}#{i}"
            if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
                errors.append(f"{where}: not a Kubernetes object (apiVersion and kind)")
                continue
            cls, name = model_of(doc["apiVersion"], doc["kind"])
            if cls is None:
                errors.append(f"{where}: {doc['apiVersion']} {doc['kind']}: no such kind in the schema ({name})")
                continue
            before = len(errors)
            check(doc, name, f"{where}:{doc['kind']}", errors)
            if len(errors) == before:
                try:  # the constructors refuse missing required fields
                    client._ApiClient__deserialize(doc, name)
                except (ValueError, TypeError) as e:
                    errors.append(f"{where}:{doc['kind']}: {e}")
            count += 1
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f"check-k8s-manifests: {count} objects valid against Kubernetes' schema (python3-kubernetes {k8s.__version__ if hasattr(k8s, '__version__') else ''})".rstrip())
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
