"""CEL as the Kubernetes API server evaluates it, for tests with no server: each CRD's ``x-kubernetes-validations``
rules on every node of a custom resource (after the schema's defaults, as the server applies them before
validation), and ValidatingAdmissionPolicies (variables, validations, message expressions) on the objects their
bindings match.

The language is cel-python (PyPI ``cel-python``, the maintained pure-Python CEL: no compiler or binary to fetch,
and the same library ``tests/unit/test_quotas.py`` already evaluates the platform's own claim policy with). The
Kubernetes CEL libraries it lacks are added here, only those the pinned CRDs and policies call
(k8s.io/apiserver/pkg/cel/library at v1.33): the extended strings' ``split``/``replace``/``join``, the lists'
``sum``, ``quantity`` with ``compareTo``, the ``format`` library's ``dns1123Label``/``qualifiedName`` with
``validate``, the optionals' ``hasValue``/``orValue``, and ``matches`` with RE2 (google-re2), as Go evaluates it.
Transition rules (those reading ``oldSelf``) are not evaluated: the objects here are created, never updated.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import celpy
import re2
from celpy import celtypes

from tests.conformance.upstream import crd_schema, upstream_crds

# ---------------------------------------------------------------- the Kubernetes CEL libraries


class _Format:
    """The ``format`` variable: ``format.dns1123Label()`` and ``format.qualifiedName()`` pick a validator."""


@dataclass(frozen=True)
class _Validator:
    name: str


class _Optional:
    """An optional value (``optional.none()`` when ``value`` is None)."""

    def __init__(self, value: Any = None):
        self.value = value


@functools.total_ordering
class _Quantity:
    """A resource.Quantity (k8s.io/apimachinery), compared by its exact value."""

    SUFFIXES = {
        "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
        "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
        "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    }  # fmt: skip
    PATTERN = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[a-zA-Z]*)$")

    def __init__(self, text: str):
        m = self.PATTERN.match(str(text))
        if not m or (m[2] and m[2][0] not in "eE" and m[2] not in self.SUFFIXES):
            raise ValueError(f"quantities must match the regular expression; got {text!r}")
        number, suffix = Decimal(m[1]), m[2]
        self.value = (
            number * Decimal(10) ** int(suffix[1:])
            if suffix[:1] in ("e", "E")
            else number * Decimal(self.SUFFIXES[suffix])
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Quantity) and self.value == other.value

    def __lt__(self, other: _Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)


_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _format_errors(name: str, value: str) -> list[str]:
    """The errors k8s.io/apimachinery/pkg/util/validation gives (IsDNS1123Label, IsQualifiedName)."""
    if name == "dns1123Label":
        errors = [] if len(value) <= 63 else ["must be no more than 63 characters"]
        if not _DNS1123_LABEL.match(value):
            errors.append("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'")
        return errors
    prefix, _, short = value.rpartition("/")
    errors = []
    if "/" in value and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        errors.append("prefix part must be a lowercase RFC 1123 subdomain")
    if not short or len(short) > 63 or not _QUALIFIED_NAME.match(short):
        errors.append("name part must consist of alphanumeric characters, '-', '_' or '.'")
    return errors


def _validate(validator: _Validator, value: Any) -> _Optional:
    errors = _format_errors(validator.name, str(value))
    return _Optional(celtypes.ListType([celtypes.StringType(e) for e in errors]) if errors else None)


def _or_value(optional: _Optional, default: Any) -> Any:
    return default if optional.value is None else optional.value


def _compare_to(a: _Quantity, b: _Quantity) -> celtypes.IntType:
    return celtypes.IntType((a > b) - (a < b))


def _sum(items: Any) -> Any:
    total: Any = celtypes.IntType(0)
    for item in items:
        total = total + item
    return total


_NUMBERS = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def _equal(a: Any, b: Any) -> celtypes.BoolType:
    """Heterogeneous equality (the CEL spec since 2022, cel-go as Kubernetes runs it): values of different types are
    unequal rather than an error, numbers compare by value (an int-or-string field may hold either)."""
    if isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS):
        return celtypes.BoolType(Decimal(str(a)) == Decimal(str(b)))
    if type(a) is not type(b):
        return celtypes.BoolType(False)
    return celtypes.BoolType(a == b)


FUNCTIONS: dict[str, Any] = {
    "_==_": _equal,
    "_!=_": lambda a, b: celtypes.BoolType(not _equal(a, b)),
    "matches": lambda s, pattern: celtypes.BoolType(re2.search(str(pattern), str(s)) is not None),
    "split": lambda s, sep: celtypes.ListType([celtypes.StringType(p) for p in str(s).split(str(sep))]),
    "replace": lambda s, old, new: celtypes.StringType(str(s).replace(str(old), str(new))),
    "join": lambda items, sep="": celtypes.StringType(str(sep).join(str(i) for i in items)),
    "sum": _sum,
    "quantity": lambda s: _Quantity(str(s)),
    "compareTo": _compare_to,
    "dns1123Label": lambda _: _Validator("dns1123Label"),
    "qualifiedName": lambda _: _Validator("qualifiedName"),
    "validate": _validate,
    "hasValue": lambda o: celtypes.BoolType(o.value is not None),
    "orValue": _or_value,
}


# ---------------------------------------------------------------- evaluation

_ENV = celpy.Environment()


@functools.cache
def _program(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression), functions=FUNCTIONS)


class CelError(Exception):
    """An expression that does not evaluate (the server refuses the object with the error)."""


def evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    """The value of ``expression`` with ``activation``'s variables (JSON values are converted)."""
    names = {
        k: v if isinstance(v, (_Format, celtypes.MapType)) else celpy.json_to_cel(v) for k, v in activation.items()
    }
    try:
        result = _program(expression).evaluate({**names, "format": _Format()})
    except celpy.CELEvalError as error:
        raise CelError(str(error)) from error
    if isinstance(result, celpy.CELEvalError):
        raise CelError(str(result))
    return result


def holds(expression: str, activation: Mapping[str, Any]) -> bool:
    result = evaluate(expression, activation)
    if not isinstance(result, celtypes.BoolType):
        raise CelError(f"expected a bool, got {type(result).__name__}")
    return bool(result)


# ---------------------------------------------------------------- CRD rules


def with_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """``value`` with the schema's ``default``s filled in where a field is absent (the server's defaulting)."""
    if isinstance(value, dict):
        out = dict(value)
        for name, sub in (schema.get("properties") or {}).items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = with_defaults(sub, out[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name in set(out) - set(schema.get("properties") or {}):
                out[name] = with_defaults(extra, out[name])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [with_defaults(schema["items"], item) for item in value]
    return value


@dataclass
class RuleResult:
    path: str
    rule: str
    error: str | None
    """None: the rule held; else what the server would say."""


def _rule_nodes(schema: Mapping[str, Any], value: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any], Any]]:
    if value is None:
        return
    if schema.get("x-kubernetes-validations"):
        yield path, schema, value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            sub = props.get(name) or (extra if isinstance(extra, Mapping) else None)
            if sub is not None:
                yield from _rule_nodes(sub, item, f"{path}.{name}")
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            yield from _rule_nodes(schema["items"], item, f"{path}[{i}]")


def crd_rules(obj: Mapping[str, Any]) -> list[RuleResult]:
    """Every CEL rule of the object's CRD that applies to a value the object (defaulted) has, evaluated."""
    schema = crd_schema(obj["apiVersion"], obj["kind"])
    if schema is None:
        return []
    results = []
    for path, node, value in _rule_nodes(schema, with_defaults(schema, dict(obj)), "self"):
        for rule in node["x-kubernetes-validations"]:
            if "oldSelf" in rule["rule"]:
                continue  # a transition rule: evaluated on update only
            try:
                ok = holds(rule["rule"], {"self": value})
                error = None if ok else _message(rule, {"self": value})
            except CelError as e:
                error = f"rule {rule['rule']!r} did not evaluate: {e}"
            results.append(RuleResult(path, rule["rule"], error))
    return results


def _message(rule: Mapping[str, Any], activation: Mapping[str, Any]) -> str:
    if rule.get("messageExpression"):
        try:
            return str(evaluate(rule["messageExpression"], activation))
        except CelError:
            pass
    return rule.get("message") or f"failed rule: {rule.get('rule') or rule.get('expression')}"


def crd_rule_errors(obj: Mapping[str, Any]) -> list[str]:
    meta = obj.get("metadata") or {}
    label = f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}"
    return [f"{label}: {r.path}: {r.error}" for r in crd_rules(obj) if r.error]


# ---------------------------------------------------------------- ValidatingAdmissionPolicies


def _matches(rules: list[Mapping[str, Any]], group: str, version: str, resource: str, operation: str) -> bool:
    def one(values: list[str], value: str) -> bool:
        return "*" in values or value in values

    return any(
        one(r.get("apiGroups", []), group)
        and one(r.get("apiVersions", []), version)
        and one(r.get("resources", []), resource)
        and one(r.get("operations", []), operation)
        for r in rules
    )


@dataclass
class Policy:
    """A ValidatingAdmissionPolicy with its binding (``Deny`` bindings only: the others do not refuse)."""

    policy: Mapping[str, Any]
    binding: Mapping[str, Any]

    @property
    def name(self) -> str:
        return self.policy["metadata"]["name"]

    def applies(self, group: str, version: str, resource: str, operation: str) -> bool:
        constraints = (self.policy["spec"].get("matchConstraints") or {}).get("resourceRules") or []
        narrowed = (self.binding.get("spec", {}).get("matchResources") or {}).get("resourceRules")
        return _matches(constraints, group, version, resource, operation) and (
            narrowed is None or _matches(narrowed, group, version, resource, operation)
        )

    def refusals(self, obj: Mapping[str, Any], operation: str = "CREATE", user: str = "tests") -> list[str]:
        """What the policy says of ``obj`` (empty: admitted), each failed validation's message."""
        spec = self.policy["spec"]
        request = {"operation": operation, "userInfo": {"username": user}}
        base = {"object": celpy.json_to_cel(obj), "oldObject": None, "request": celpy.json_to_cel(request)}
        for condition in spec.get("matchConditions") or []:
            if not holds(condition["expression"], {**base, "variables": celtypes.MapType({})}):
                return []
        variables: dict[Any, Any] = {}
        for variable in spec.get("variables") or []:
            scope = {**base, "variables": celtypes.MapType(variables)}
            variables[celtypes.StringType(variable["name"])] = evaluate(variable["expression"], scope)
        scope = {**base, "variables": celtypes.MapType(variables)}
        out = []
        for validation in spec.get("validations") or []:
            try:
                ok = holds(validation["expression"], scope)
            except CelError as e:  # failurePolicy Fail: an error refuses
                out.append(f"{self.name}: {validation['expression'].strip()!r} did not evaluate: {e}")
                continue
            if not ok:
                out.append(f"{self.name}: {_message(validation, scope)}")
        return out


def policies(documents: list[Mapping[str, Any]]) -> list[Policy]:
    """Each policy of ``documents`` with its Deny binding."""
    by_name = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"}
    return [
        Policy(by_name[b["spec"]["policyName"]], b)
        for b in documents
        if b["kind"] == "ValidatingAdmissionPolicyBinding" and "Deny" in b["spec"].get("validationActions", [])
    ]


@functools.cache
def _plurals() -> dict[tuple[str, str], str]:
    return {
        (f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"]): crd["spec"]["names"]["plural"]
        for crd in upstream_crds()
        for v in crd["spec"]["versions"]
    }


def resource_of(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """(group, version, resource) of an object: a CRD's plural, or a built-in kind's (Pod: pods)."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    group, _, version = api_version.rpartition("/")
    plural = _plurals().get((api_version, kind)) or f"{kind.lower()}s"
    return group, version, plural


def policy_refusals(found: list[Policy], obj: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(names of the policies that apply to creating ``obj``, what they refuse)."""
    applied = [p for p in found if p.applies(*resource_of(obj), "CREATE")]
    return [p.name for p in applied], [r for p in applied for r in p.refusals(obj)]
