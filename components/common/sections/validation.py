"""The one way settings are checked: parse a mapping into a settings model, translate pydantic's errors into
``Problem``s with camelCase key paths and hints, then collect every section's ``problems()`` from the tree, so a
bad stack gets every problem at once, each with its key path, the expectation and a hint.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .base import Section
from .problems import MISSING, Problem, SettingsError

CONFIG_DOCS = "docs/config.md"


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
    "finite_number": "expected a finite number (not .nan or .inf)",
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
    got = error.get("input", MISSING)
    _, info = _walk(model, loc)
    about = info.description.rstrip(".") + ". " if info is not None and info.description else ""
    hint = f"{about}See {CONFIG_DOCS}."
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        known = _field_names(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known keys here: {', '.join(known)}"
        return Problem(key, "no such key", MISSING if got is MISSING else loc[-1], hint)
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
