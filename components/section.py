"""Settings sections: the base model, field types, and the one way settings are checked.

Every section is a pydantic model that forbids unknown keys: its types, ranges and patterns are checked as it
is parsed. Rules that need more than one value (or an opt-in flag) are a section's ``problems()``: each
returns ``Problem``s with keys relative to the section, and ``validate`` collects them from every section of
the tree, so a bad stack gets every problem at once, each with its key path, the expectation and a hint.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, TypeVar

import pulumi
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

CONFIG_DOCS = "docs/config.md"


class Section(BaseModel):
    """Base of every settings section: camelCase keys, no unknown keys, no type coercion, immutable."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )

    def problems(self) -> list[Problem]:
        """Rules across this section's values, keys relative to the section (none by default)."""
        return []


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise PydanticCustomError("quantity", "expected a Kubernetes quantity such as 10Gi, 512Mi or 500m")
    return value


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.match(value):
        raise PydanticCustomError(
            "dns_label", "expected a DNS label: lower-case letters, digits and '-', at most 63 characters"
        )
    return value


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise PydanticCustomError("regex", "expected a regular expression ({error})", {"error": exc}) from None
    return value


_CRON_FIELDS = (
    (0, 59, ()),
    (0, 23, ()),
    (1, 31, ()),
    (1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
    (0, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")),
)
"""Range and names of each field of a five-field cron schedule, as Kubernetes parses it (robfig/cron)."""


def _cron_value(text: str, low: int, names: tuple[str, ...]) -> int:
    """A number, or a name (``JAN``, ``MON``) counted from ``low``; -1 when it is neither."""
    if text.isdigit():
        return int(text)
    return low + names.index(text.upper()) if text.upper() in names else -1


def _cron_field(text: str, low: int, high: int, names: tuple[str, ...]) -> bool:
    """One field: comma-separated items, each ``*``/``?``, a value or a range ``a-b``, with an optional ``/step``."""
    for item in text.split(","):
        span, slash, step = item.partition("/")
        if slash and not (step.isdigit() and int(step) > 0):
            return False
        if span in ("*", "?"):
            continue
        ends = [_cron_value(v, low, names) for v in span.split("-")]
        if len(ends) > 2 or not all(low <= v <= high for v in ends) or ends != sorted(ends):
            return False
    return True


def _cron(value: str) -> str:
    fields = value.split()
    if len(fields) != 5 or not all(_cron_field(f, *spec) for f, spec in zip(fields, _CRON_FIELDS, strict=True)):
        raise PydanticCustomError(
            "cron",
            "expected a cron schedule of five fields (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or "
            "JAN-DEC, day of week 0-6 or SUN-SAT), each *, a value, a range a-b or a list, with an optional /step",
        )
    return value


Quantity = Annotated[str, AfterValidator(_quantity)]
"""A Kubernetes resource quantity, e.g. ``10Gi`` or ``500m``."""
DnsLabel = Annotated[str, AfterValidator(_dns_label)]
"""A Kubernetes name that must be a DNS label (namespaces, services, queues)."""
Regex = Annotated[str, AfterValidator(_regex)]
"""A regular expression (Python syntax)."""
Cron = Annotated[str, AfterValidator(_cron)]
"""A five-field cron schedule that Kubernetes accepts for a CronJob."""


class Resources(Section):
    """Container requests and limits."""

    cpu_request: Quantity = "100m"
    """CPU the scheduler reserves for the container."""
    memory_request: Quantity = "128Mi"
    """Memory the scheduler reserves for the container."""
    cpu_limit: Quantity | None = None
    """CPU ceiling; unset leaves the container burstable."""
    memory_limit: Quantity = "512Mi"
    """Memory ceiling; the container is OOM-killed above it."""

    def spec(self) -> dict[str, dict[str, str]]:
        """The Kubernetes ``resources`` block."""
        limits = {"memory": self.memory_limit}
        if self.cpu_limit:
            limits["cpu"] = self.cpu_limit
        return {"requests": {"cpu": self.cpu_request, "memory": self.memory_request}, "limits": limits}


class ControllerSettings(Section):
    """Replicas and resources of a chart's controllers (schedulers, controllers, webhooks)."""

    replicas: int = Field(1, ge=1, le=5)
    """Replicas of each controller; with 2 or more they elect a leader, spread over nodes where the chart allows
    it, and a PodDisruptionBudget keeps one up through drains."""
    resources: Resources | None = None
    """Requests and limits of each controller container; unset keeps the chart's."""


@dataclass(frozen=True)
class Problem:
    """One rejected setting: where it is, what was expected, what was given, and what to do."""

    key: str
    expected: str
    got: Any
    hint: str

    def __str__(self) -> str:
        got = "nothing" if self.got is _MISSING else repr(self.got)
        return f"{self.key}: {self.expected}; got {got}. Hint: {self.hint}"


_MISSING = object()


class SettingsError(pulumi.RunError):
    """Raised when stack settings are invalid; Pulumi reports a RunError without a traceback."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid stack settings ({len(problems)} problem(s)):\n{lines}")


def _walk(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, Any]:
    """The (model, field) found by following ``loc`` through nested models; (None, None) if it leaves them."""
    current: Any = model
    field = None
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None, None
        field = {f.alias or n: f for n, f in current.model_fields.items()}.get(str(part))
        if field is None:
            return None, None
        current = _model_in(field.annotation)
    return current, field


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The camelCase keys the model accepts at ``loc`` (for did-you-mean on unknown keys)."""
    current, _ = _walk(model, loc)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside an annotation such as ``X``, ``X | None`` or ``list[X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _key_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(root)"


_EXPECTED = {
    "bool_type": "expected true or false",
    "int_type": "expected a whole number",
    "float_type": "expected a number",
    "string_type": "expected a string",
    "dict_type": "expected a mapping of keys to values",
    "model_type": "expected a mapping of keys to values",
    "list_type": "expected a list",
    "missing": "a value is required",
}


_UNION_BRANCH = re.compile(r"^(int|float|str|bool|none|constrained-\w+|[a-z-]+\[.*\])$")
"""How pydantic names the branch of a union (``X | int``) in an error's location, e.g. ``int``."""


def _problem(model: type[BaseModel], error: Any) -> Problem:
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and _UNION_BRANCH.match(part)))
    kind = error["type"]
    key = _key_path(loc)
    got = error.get("input", _MISSING)
    _, info = _walk(model, loc)
    about = info.description.rstrip(".") + ". " if info is not None and info.description else ""
    hint = f"{about}See {CONFIG_DOCS}."
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        known = _field_names(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known keys here: {', '.join(known)}"
        return Problem(key, "no such key", _MISSING if got is _MISSING else loc[-1], hint)
    if kind == "literal_error":
        expected = f"expected one of {ctx['expected']}".replace(" or ", ", ")
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()))
        bound = int(bound) if isinstance(bound, float) and bound.is_integer() else bound
        expected = f"expected a number {op} {bound}"
    elif kind == "string_pattern_mismatch":
        expected = f"expected text matching {ctx['pattern']}"
    else:
        expected = _EXPECTED.get(kind, error["msg"][0].lower() + error["msg"][1:])
    return Problem(key, expected, got, hint)


S = TypeVar("S", bound=Section)


def validate(model: type[S], data: Mapping[str, Any]) -> S:
    """Parse ``data`` into ``model``, then check every section's rules; all problems raise one SettingsError."""
    try:
        parsed = model.model_validate(dict(data))
    except ValidationError as exc:
        found: dict[str, Problem] = {}
        for problem in (_problem(model, e) for e in exc.errors(include_url=False)):
            if problem.key in found:  # each branch of a union refused it: one problem with every expectation
                other = problem.expected.removeprefix("expected ")
                problem = replace(found[problem.key], expected=f"{found[problem.key].expected}, or {other}")
            found[problem.key] = problem
        raise SettingsError(list(found.values())) from None
    problems = rule_problems(parsed)
    if problems:
        raise SettingsError(problems)
    return parsed


def rule_problems(section: Section, at: str = "") -> list[Problem]:
    """The ``problems()`` of ``section`` and of every section inside it, with keys from the root."""
    found = [replace(p, key=_joined(at, p.key)) for p in section.problems()]
    for name, info in type(section).model_fields.items():
        for key, inner in _sections(_joined(at, info.alias or name), getattr(section, name)):
            found += rule_problems(inner, key)
    return found


def _joined(at: str, key: str) -> str:
    return f"{at}.{key}" if at and key else at or key


def _sections(key: str, value: Any) -> Iterator[tuple[str, Section]]:
    """The sections in a field's value (itself, list items, mapping values), each with its key path."""
    if isinstance(value, Section):
        yield key, value
    elif isinstance(value, list):
        yield from ((f"{key}[{i}]", v) for i, v in enumerate(value) if isinstance(v, Section))
    elif isinstance(value, dict):
        yield from ((f"{key}.{k}", v) for k, v in value.items() if isinstance(v, Section))


def leaf_keys(model: type[BaseModel], prefix: str = "", defaults: Any = None) -> list[tuple[str, Any, Any]]:
    """Every leaf setting as (camelCase key path, FieldInfo, default), depth first."""
    found: list[tuple[str, Any, Any]] = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{info.alias or name}"
        default = getattr(defaults, name) if defaults is not None else info.get_default(call_default_factory=True)
        nested = info.annotation if isinstance(info.annotation, type) else None
        if nested is not None and issubclass(nested, BaseModel):
            found += leaf_keys(nested, key + ".", default)
        else:
            found.append((key, info, default))
    return found


def _type_text(annotation: Any) -> str:
    text = repr(annotation).replace("typing.", "").replace("NoneType", "None")
    text = re.sub(r"Annotated\[(\w+), [^\]]*\]", r"\1", text)
    text = re.sub(r"Literal\[([^\]]*)\]", lambda m: "one of " + m.group(1).replace("'", ""), text)
    return re.sub(r"<class '(\w+)'>", r"\1", text).replace("|", "or")


def reference(model: type[BaseModel], *sections: tuple[str, str, type[BaseModel]]) -> str:
    """The config reference (Markdown tables) of every key the model accepts, then of each further
    (title, introduction, model) section."""
    lines = [
        "# Configuration reference",
        "",
        "Generated by `python -m components docs` from the settings models; do not edit by hand.",
        "Set a key in `Pulumi.<stack>.yaml` under `ai-storage-platform:<section>` (e.g.",
        "`pulumi config set --path 'ai-storage-platform:objectStore.backend' s3`); the stack's profile in",
        "`stacks/` supplies the rest, and code defaults (below) anything neither sets.",
        "",
        *_key_table(model),
    ]
    for title, intro, extra in sections:
        lines += ["", f"## {title}", "", intro, "", *_key_table(extra)]
    return "\n".join(lines) + "\n"


def _key_table(model: type[BaseModel]) -> list[str]:
    lines = ["| key | type | default | what it does |", "|---|---|---|---|"]
    for key, info, default in leaf_keys(model):
        if isinstance(default, BaseModel):
            default = default.model_dump(by_alias=True)
        elif isinstance(default, list):
            default = [d.model_dump(by_alias=True) if isinstance(d, BaseModel) else d for d in default]
        text = json.dumps(default, default=str).replace("|", "\\|")
        about = " ".join((info.description or "").split())
        lines.append(f"| `{key}` | {_type_text(info.annotation)} | `{text}` | {about} |")
    return lines
