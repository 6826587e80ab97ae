"""The base of every settings section, and the sections many components share (container resources,
controller replicas).

Every section is a pydantic model that forbids unknown keys: its types, ranges and patterns are checked as it
is parsed. Rules that need more than one value (or an opt-in flag) are a section's ``problems()`` (see
``validation``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from .fields import Quantity
from .problems import Problem


class Section(BaseModel):
    """Base of every settings section: camelCase keys, no unknown keys, no type coercion, no NaN or infinite
    number, immutable."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )

    def problems(self) -> list[Problem]:
        """Rules across this section's values, keys relative to the section (none by default)."""
        return []


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
