"""The field types of settings: strings checked as they are parsed (quantities, DNS labels, regular expressions,
cron schedules, resource references), each refused with what was expected."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

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

_REF = re.compile(
    r"^([A-Z][A-Za-z0-9]*/([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-.a-z0-9]*[a-z0-9])?"
    r"|[a-z0-9-]+:[A-Za-z0-9/._-]*:[A-Za-z0-9]+/[A-Za-z0-9._-]+"
    r"|Setting/[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*|\[[A-Za-z0-9._-]+\])*)$"
)


def _resource_ref(value: str) -> str:
    if not _REF.match(value):
        raise PydanticCustomError(
            "resource_ref",
            "expected a resource as the diff names it: <Kind>/<namespace>/<name>, <Kind>/<name> for a "
            "cluster-scoped object, <type token>/<resource name>, or Setting/<key> for a setting's change (e.g. "
            "StatefulSet/juicefs-meta/redis, Setting/rookCeph.replicaSize)",
        )
    return value


ResourceRef = Annotated[str, AfterValidator(_resource_ref)]
"""A resource as ``python -m components diff`` names it (e.g. ``StatefulSet/juicefs-meta/redis``)."""


_WINDOW = re.compile(r"^[0-9]+(ms|s|m|h)$")
_IMAGE_DIGEST = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
_IMAGE_TAG = re.compile(r"^[^\s@]+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def _window(value: str) -> str:
    if not _WINDOW.match(value) or not int(value.rstrip("msh")):
        raise PydanticCustomError(
            "window", "expected a positive duration: a whole number above 0 and ms, s, m or h (e.g. 30s, 5m, 1h)"
        )
    return value


def _pinned_image(value: str) -> str:
    if _IMAGE_DIGEST.match(value):
        return value
    tag = value.rpartition(":")[2]
    if not _IMAGE_TAG.match(value) or "/" in tag or tag == "latest":
        raise PydanticCustomError(
            "pinned_image",
            "expected an image pinned by a version tag or a digest (e.g. ghcr.io/org/trainer:1.4.0 or "
            "<image>@sha256:<64 hex>), not latest and not without a tag: a mutable tag runs whatever was pushed last",
        )
    return value


Window = Annotated[str, AfterValidator(_window)]
"""A positive Prometheus duration (a rate window, a scrape interval): ``30s``, ``5m``, ``1h``; never zero."""
PinnedImage = Annotated[str, AfterValidator(_pinned_image)]
"""A container image pinned by a tag other than ``latest``, or by a digest."""


KmsKeyArn = Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+$")]
"""The ARN of an AWS KMS key (not an alias: IAM policies grant keys by key ARN)."""
