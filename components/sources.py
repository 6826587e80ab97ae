"""Where the platform fetches upstream pieces: each chart's repository and the kustomize directories of what
upstream publishes only as a git tree, upstream's by default, a mirror's when the stack names one (air-gapped
clusters; docs/air-gapped.md lists every source and image). Versions stay the pinned ones (``common/versions.py``);
the Platform hands the stack's choices to ``versions.use_mirrors`` before it builds anything.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field

from .common import versions
from .sections import Problem, Section

_PINNED_REF = re.compile(r"(/tree/|[?&]ref=)(?!(main|master|HEAD|latest)\b)[^/?&]+")
_REMOTE = re.compile(r"^(https?://|ssh://|git@|git::)")


class KustomizeSources(Section):
    """Kustomize directories (a URL at a tag or commit, or a directory on the machine running Pulumi)."""

    snapshot_crds: str = Field(versions.KUSTOMIZE["snapshotCrds"], pattern=r"^\S+$")
    """The CSI snapshot CRDs (external-snapshotter; only with `rookCeph.snapshotController: install`)."""
    snapshot_controller: str = Field(versions.KUSTOMIZE["snapshotController"], pattern=r"^\S+$")
    """The CSI snapshot-controller (external-snapshotter; only with `rookCeph.snapshotController: install`)."""
    training_operator_v1: str = Field(versions.KUSTOMIZE["trainingOperatorV1"], pattern=r"^\S+$")
    """Kubeflow's v1 training operator, standalone overlay (with `training-operator-v1` in `training.operators`)."""

    def problems(self) -> list[Problem]:
        """A URL must name a tag or commit (a branch moves); a local directory must exist."""
        found = []
        for key, where in self.model_dump(by_alias=True).items():
            if _REMOTE.match(where) and not _PINNED_REF.search(where):
                expected = "expected a URL at a tag or commit (.../tree/<tag>/..., or ?ref=<tag>)"
                found.append(Problem(key, expected, where, "a branch moves under the stack; pin the mirror's tag"))
            elif not _REMOTE.match(where) and not Path(where).is_dir():
                expected = "expected a URL at a tag or commit, or an existing directory"
                hint = "a local path is read on the machine running Pulumi, relative to the project directory"
                found.append(Problem(key, expected, where, hint))
        return found


class SourcesSettings(Section):
    """Chart repositories and kustomize directories to use instead of upstream's (mirrors)."""

    charts: dict[str, str] = {}
    """Chart name to the repository serving it at the pinned version (`https://` Helm repository or `oci://`
    registry); charts not named come from upstream."""
    kustomize: KustomizeSources = KustomizeSources()
    """What upstream publishes only as a git tree, each defaulting to upstream's pinned tag."""

    def problems(self) -> list[Problem]:
        """Only pinned charts, each from an http(s) or OCI repository."""
        found = []
        for name, repo in self.charts.items():
            if name not in versions.CHARTS:
                expected = f"expected one of the pinned charts ({', '.join(sorted(versions.CHARTS))})"
                found.append(Problem(f"charts.{name}", expected, name, "name the chart as common/versions.py pins it"))
            elif not re.match(r"^(https?|oci)://\S+$", repo):
                expected = "expected a Helm repository (https://...) or an OCI registry (oci://...)"
                found.append(Problem(f"charts.{name}", expected, repo, "the chart's version stays the pinned one"))
        return found

    def use(self) -> None:
        """Make these the stack's sources (``versions.chart`` and ``versions.kustomize`` read them)."""
        versions.use_mirrors(self.charts, self.kustomize.model_dump(by_alias=True))  # keys spelled as KUSTOMIZE's
