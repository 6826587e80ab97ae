"""Conformance checks against the unmodified upstream files in the shared folder.

Custom resources are checked against upstream CRD schemas, built-in Kubernetes objects against
kubernetes-validate's strict schemas, Helm value paths against upstream ``values.yaml`` and chart
pins against the versions the shared folder records. Every check returns a list of readable error
strings; an empty list means the input conforms.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import re2
import yaml
from kubernetes_validate import utils as kv_utils
from packaging.version import InvalidVersion, Version

SHARED = Path(os.environ.get("AI_STORAGE_SHARED") or Path(__file__).resolve().parents[2].parent / "shared")
UPSTREAM = SHARED / "upstream"

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Subcharts whose values live in their own upstream folder: chart_dir -> {values key: subchart dir}.
# topolvm's cert-manager dependency is ~1.17.x; the only saved cert-manager values are v1.21.1.
SUBCHARTS: dict[str, dict[str, str]] = {
    "kubeflow-trainer": {"jobset": "kubeflow-trainer/jobset"},
    "topolvm": {"cert-manager": "cert-manager"},
}

# Charts whose in-repo Chart.yaml carries a placeholder version (0.0.1, v0.0.0, 0.2.0) stamped at
# release time: chart_dir -> the upstream repository whose release tag in SOURCE.txt is the version.
VERSION_FROM_SOURCE_TAG: dict[str, str] = {
    "rook-ceph/rook-ceph": "rook/rook",
    "rook-ceph/rook-ceph-cluster": "rook/rook",
    "rook-ceph/ceph-csi-drivers/chart": "ceph/ceph-csi-operator",
    "cert-manager": "cert-manager/cert-manager",
}

_K8S_STRUCTURAL_KEYS = ("x-kubernetes-list-type", "x-kubernetes-list-map-keys")
_INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]
_MESSAGE_LIMIT = 240


# ---------------------------------------------------------------- custom resources


@functools.cache
def _crd_index() -> dict[tuple[str, str], dict[str, Any]]:
    """(group/version, kind) -> openAPIV3Schema, for every served CRD version under UPSTREAM."""
    index: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(UPSTREAM.rglob("*.yaml")):
        text = path.read_text()
        if "CustomResourceDefinition" not in text or "{{" in text:
            continue  # not a CRD file, or a Helm template rather than plain YAML
        for doc in yaml.load_all(text, Loader=_Loader):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                schema = version["schema"]["openAPIV3Schema"]
                if index.setdefault(key, schema) != schema:
                    raise ValueError(f"{path}: {key} is defined twice upstream with different schemas")
    return index


@functools.cache
def upstream_crds() -> tuple[dict[str, Any], ...]:
    """Every plain CRD under UPSTREAM (Helm templates skipped), once per name (shared: do not mutate)."""
    crds: dict[str, dict[str, Any]] = {}
    for path in sorted(UPSTREAM.rglob("*.yaml")):
        text = path.read_text()
        if "CustomResourceDefinition" not in text or "{{" in text:
            continue
        for doc in yaml.load_all(text, Loader=_Loader):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.setdefault(doc["metadata"]["name"], doc)
    return tuple(crds.values())


def volcano_validating_policies() -> list[dict[str, Any]]:
    """Volcano's own ValidatingAdmissionPolicies and their bindings (its chart's ``custom.vap_enable``)."""
    return [
        doc
        for path in sorted((UPSTREAM / "volcano" / "policy").glob("*-validating.yaml"))
        for doc in yaml.load_all(path.read_text(), Loader=_Loader)
        if isinstance(doc, dict) and doc.get("kind")
    ]


def crd_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    """The upstream openAPIV3Schema of a served CRD version, or None (shared: do not mutate)."""
    return _crd_index().get((api_version, kind))


def _structural(node: Mapping[str, Any]) -> dict[str, Any]:
    """Turn one structural-schema node into JSON Schema with Kubernetes pruning semantics."""
    out = {k: v for k, v in node.items() if not k.startswith("x-kubernetes-") or k in _K8S_STRUCTURAL_KEYS}
    out.pop("nullable", None)
    keeps_unknown = node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in node:
        out["properties"] = {name: _structural(sub) for name, sub in node["properties"].items()}
    if isinstance(node.get("items"), Mapping):
        out["items"] = _structural(node["items"])
    if isinstance(node.get("additionalProperties"), Mapping):
        out["additionalProperties"] = _structural(node["additionalProperties"])
    elif node.get("type") == "object" and not keeps_unknown:
        # the apiserver prunes unknown fields (strict field validation rejects them)
        out.setdefault("additionalProperties", False)
    if node.get("x-kubernetes-int-or-string"):
        if out.get("anyOf") == _INT_OR_STRING_ANY_OF:
            del out["anyOf"]
        out["type"] = ["integer", "string"]
    if node.get("nullable"):
        types = out.get("type")
        if types is not None:
            out["type"] = [*(types if isinstance(types, list) else [types]), "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def _root_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """JSON Schema for a whole custom resource: apiVersion/kind accepted, metadata must name it."""
    out = _structural(schema)
    out["properties"] = {
        **out.get("properties", {}),
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1}},
        },
    }
    out["required"] = sorted({*out.get("required", []), "metadata"})
    return out


def _list_type(validator: Any, list_type: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """x-kubernetes-list-type: set items, and map items' key tuples, must be unique."""
    if not validator.is_type(instance, "array") or list_type not in ("set", "map"):
        return
    map_keys = schema.get("x-kubernetes-list-map-keys", [])
    seen: list[Any] = []
    for item in instance:
        if list_type == "set":
            key = item
        elif isinstance(item, dict):
            key = {k: item.get(k) for k in map_keys}
        else:
            continue  # a non-object item is reported by "type"
        if key in seen:
            yield jsonschema.ValidationError(f"duplicate entry {key!r} in a list of type {list_type}")
        seen.append(key)


@functools.cache
def go_regexp(pattern: str) -> Any:
    """``pattern`` compiled as the API server compiles a CRD's ``pattern``: Go's regexp, RE2 syntax
    (``^(?i)...`` is valid there and an error in Python's ``re``)."""
    return re2.compile(pattern)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """The ``pattern`` keyword with RE2 semantics instead of jsonschema's ``re.search``."""
    if validator.is_type(instance, "string") and not go_regexp(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_CRValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    {"x-kubernetes-list-type": _list_type, "pattern": _pattern},
)


@functools.cache
def _cr_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    schema = crd_schema(api_version, kind)
    return None if schema is None else _CRValidator(_root_schema(schema))


def _label(obj: Mapping[str, Any]) -> str:
    name = (obj.get("metadata") or {}).get("name") or "<unnamed>"
    return f"{obj.get('kind', '<no kind>')}/{name}"


def _json_path(path: Any) -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return text.lstrip(".") or "(root)"


def _describe(label: str, error: jsonschema.ValidationError) -> list[str]:
    """Readable messages for one jsonschema error; unknown fields are named one by one."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = list(error.schema.get("properties", {}))
        messages = []
        for field in sorted(set(error.instance) - set(known)):
            hint = difflib.get_close_matches(field, known, n=1)
            did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
            messages.append(f"{label}: {_json_path([*path, field])}: unknown field{did_you_mean}")
        return messages
    message = error.message
    if len(message) > _MESSAGE_LIMIT:
        message = message[:_MESSAGE_LIMIT] + "..."
    return [f"{label}: {_json_path(path)}: {message}"]


def validate_custom_resource(obj: Mapping[str, Any]) -> list[str]:
    """Validate a custom resource against its upstream CRD schema (structural-schema semantics).

    Not checked: CEL rules (x-kubernetes-validations), formats, and defaulting.
    """
    label = _label(obj)
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    validator = _cr_validator(api_version, kind) if api_version and kind else None
    if validator is None:
        return [f"{label}: no upstream schema for {api_version} {kind} under {UPSTREAM}"]
    errors = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
    return [message for error in errors for message in _describe(label, error)]


# ---------------------------------------------------------------- built-in Kubernetes objects


def _major_minor(version: str) -> Version:
    parsed = Version(version)
    return Version(f"{parsed.major}.{parsed.minor}")


@functools.cache
def _builtin_groups() -> frozenset[str]:
    """API groups of all kinds in kubernetes-validate's newest schemas ("" is the core group)."""
    latest = kv_utils.latest_version()
    definitions = kv_utils.schema_contents(f"kubernetes-json-schema/v{latest}-local-strict/_definitions.json", latest)
    return frozenset(
        gvk["group"]
        for definition in definitions["$defs"].values()
        for gvk in definition.get("x-kubernetes-group-version-kind", [])
    )


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def is_builtin_kind(obj: Mapping[str, Any]) -> bool:
    """True when the object's API group is served by Kubernetes itself (per kubernetes-validate)."""
    return _group(str(obj.get("apiVersion", ""))) in _builtin_groups()


def validate_kubernetes_object(obj: Mapping[str, Any], kubernetes_version: str) -> list[str]:
    """Validate a built-in object, strict, for e.g. "1.33"; kubernetes-validate reports one error."""
    label = _label(obj)
    if not obj.get("apiVersion") or not obj.get("kind"):
        return [f"{label}: apiVersion and kind are required"]
    supported = [_major_minor(v) for v in kv_utils.all_versions()]
    try:
        wanted = _major_minor(kubernetes_version.removeprefix("v"))
    except InvalidVersion:
        return [f"{label}: {kubernetes_version!r} is not a Kubernetes version"]
    if wanted not in supported:
        tool = f"kubernetes-validate {kubernetes_validate.__version__}"
        span = f"{supported[0]} to {supported[-1]}"
        return [f"{label}: {tool} has schemas for Kubernetes {span}, not {wanted}"]
    try:
        kubernetes_validate.validate(dict(obj), str(wanted), strict=True)
    except kubernetes_validate.ValidationError as error:
        return _describe(label, error)
    except kubernetes_validate.SchemaNotFoundError as error:
        return [f"{label}: {error.message}"]
    return []


def validate_object(obj: Mapping[str, Any], kubernetes_version: str) -> list[str]:
    """Send built-in kinds to kubernetes-validate and all others to the upstream CRD schemas."""
    if is_builtin_kind(obj):
        return validate_kubernetes_object(obj, kubernetes_version)
    return validate_custom_resource(obj)


# ---------------------------------------------------------------- Helm values


@functools.cache
def _chart_values(chart_dir: str) -> Any:
    return yaml.load((UPSTREAM / chart_dir / "values.yaml").read_text(), Loader=_Loader)


def _leaves(values: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf (path, value) of a values tree; lists and empty mappings are leaves."""
    for key, value in values.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, path)
        else:
            yield path, value


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path) or "(top level)"


def _path_error(
    upstream: Any,
    path: tuple[str, ...],
    value: Any,
    source: str,
    at: tuple[str, ...] = (),
) -> str | None:
    """Why `path` does not exist in the upstream values tree read from `source`, or None.

    A path exists when each segment is a key of the upstream mapping at that point. Upstream leaves
    a point open, accepting anything below it, when its value there is a list, an empty mapping
    ``{}`` or null: charts use those as "put your own structure here". `at` prefixes shown paths.
    """
    node = upstream
    for depth, segment in enumerate(path):
        if node is None or node == {} or isinstance(node, list):
            return None
        full, parent = _dotted((*at, *path)), _dotted((*at, *path[:depth]))
        if not isinstance(node, Mapping):
            what = f"{type(node).__name__} ({node!r})"
            return f"{full}: {parent} is a {what} in upstream {source}, not a mapping"
        if segment not in node:
            hint = difflib.get_close_matches(segment, [str(k) for k in node], n=1)
            did_you_mean = f"; did you mean {_dotted((*at, *path[:depth], hint[0]))}?" if hint else ""
            nearest = f"nearest existing parent: {parent}{did_you_mean}"
            return f"{full} is not in upstream {source} ({nearest})"
        node = node[segment]
    if isinstance(node, Mapping) and node and value is not None and not isinstance(value, Mapping):
        full = _dotted((*at, *path))
        return f"{full} is a mapping in upstream {source}; {value!r} would replace its keys"
    return None


def values_path_errors(
    chart_dir: str,
    values: Mapping[str, Any],
    free_form: Mapping[str, str] | None = None,
) -> list[str]:
    """Check that every leaf path of `values` exists in UPSTREAM/<chart_dir>/values.yaml.

    `free_form` maps a dotted prefix to the reason upstream leaves it free-form; anything below it
    passes. Keys under a subchart (see SUBCHARTS) may instead exist in the subchart's values.yaml.
    A null value (Helm's "delete this default") only needs its path to exist.
    """
    free_form = free_form or {}
    errors = [f"{chart_dir}: free-form prefix {p!r} needs a reason" for p, why in free_form.items() if not why.strip()]
    try:
        upstream = _chart_values(chart_dir)
    except FileNotFoundError:
        return [*errors, f"{chart_dir}: no upstream values.yaml under {UPSTREAM}"]
    subcharts = SUBCHARTS.get(chart_dir, {})
    for path, value in _leaves(values):
        dotted = ".".join(path)
        if any(dotted == p or dotted.startswith(p + ".") for p in free_form):
            continue
        error = _path_error(upstream, path, value, f"{chart_dir}/values.yaml")
        if error and path[0] in subcharts and len(path) > 1:
            sub_dir = subcharts[path[0]]
            source = f"{chart_dir}/values.yaml or subchart {sub_dir}/values.yaml"
            error = _path_error(_chart_values(sub_dir), path[1:], value, source, at=path[:1])
        if error:
            errors.append(f"{chart_dir}: {error}")
    return errors


# ---------------------------------------------------------------- chart versions


def _source_txt(chart_dir: str) -> Path:
    """The SOURCE.txt nearest to a chart folder, walking up to UPSTREAM."""
    folder = UPSTREAM / chart_dir
    for candidate in [folder, *folder.parents]:
        if (candidate / "SOURCE.txt").is_file():
            return candidate / "SOURCE.txt"
        if candidate == UPSTREAM:
            break
    raise LookupError(f"{chart_dir}: no SOURCE.txt under {UPSTREAM}")


@functools.cache
def upstream_chart_version(chart_dir: str) -> str:
    """The chart version recorded upstream: Chart.yaml's, or SOURCE.txt's tag for placeholders."""
    repo = VERSION_FROM_SOURCE_TAG.get(chart_dir)
    if repo:
        source = _source_txt(chart_dir)
        found = re.search(rf"github\.com/{re.escape(repo)}\s+tag\s+(\S+)", source.read_text())
        if not found:
            raise LookupError(f"{chart_dir}: {source} records no tag for {repo}")
        return found.group(1)
    chart = UPSTREAM / chart_dir / "Chart.yaml"
    if not chart.is_file():
        raise LookupError(f"{chart_dir}: no upstream Chart.yaml under {UPSTREAM}")
    return str(yaml.load(chart.read_text(), Loader=_Loader)["version"])


def chart_version_errors(pins: Mapping[str, str], newer_reasons: Mapping[str, str] | None = None) -> list[str]:
    """Compare pinned chart versions (chart_dir -> version) with the upstream reference.

    Equal passes; older fails; newer passes only with a non-empty reason in `newer_reasons`
    (chart_dir -> why the pin is ahead of the files saved in the shared folder).
    """
    newer_reasons = newer_reasons or {}
    errors = []
    for chart_dir, pin in pins.items():
        try:
            reference = upstream_chart_version(chart_dir)
        except LookupError as error:
            errors.append(str(error))
            continue
        try:
            pinned = Version(pin)
        except InvalidVersion:
            errors.append(f"{chart_dir}: pin {pin!r} is not a version")
            continue
        if pinned < Version(reference):
            errors.append(f"{chart_dir}: pinned {pin} is older than the upstream reference {reference}")
        elif pinned > Version(reference) and not newer_reasons.get(chart_dir, "").strip():
            errors.append(
                f"{chart_dir}: pinned {pin} is newer than the upstream reference {reference}; "
                "give the reason in newer_reasons or refresh the shared upstream files"
            )
    return errors
