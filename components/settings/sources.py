"""Where the platform fetches upstream pieces: each chart's repository and the kustomize directories of what
upstream publishes only as a git tree, upstream's by default, a mirror's when the stack names one (air-gapped
clusters; docs/air-gapped.md lists every source and image). Versions stay the pinned ones (``common/versions.py``);
the Platform hands the stack's choices to ``versions.use_mirrors`` before it builds anything.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field

from ..common import versions
from ..common.sections import Problem, Section

_REMOTE = re.compile(r"^(git::)?(https?://|ssh://|git@)")
_BRANCHES = ("main", "master", "HEAD", "latest")


def repo_spec(url: str) -> tuple[str, str, str, str]:
    """(host, repository, kustomization root, ref) of a remote kustomize target, split as kustomize's own parser
    splits it (``NewRepoSpecFromURL``, api/internal/git/repospec.go, which ``kustomize.v2.Directory`` hands the URL
    to): the query's ``ref`` (or ``version``); then the repository ends at ``_git/<repo>``, at ``//`` or at ``.git``,
    else after two segments (``org/repo``); the rest is the directory built. ValueError when it cannot be split."""
    rest, _, query = url.partition("?")
    params = dict(p.partition("=")[::2] for p in query.split("&") if p)
    ref = params.get("ref") or params.get("version") or ""
    rest = rest.removeprefix("git::")
    host = re.match(r"^(https?://[^/]+/|ssh://[^/]+/|git@[^:/]+[:/])", rest)
    if host is None:
        raise ValueError("no host (https://, ssh:// or git@)")
    path = rest[host.end() :]
    if "_git/" in path:
        before, after = path.split("_git/", 1)
        repo, _, root = after.partition("/")
        repo = f"{before}_git/{repo}"
    elif "//" in path:
        repo, root = path.split("//", 1)
    elif ".git" in path:
        at = path.index(".git") + len(".git")
        repo, root = path[:at], path[at:]
    else:
        parts = path.split("/")
        if len(parts) < 2:
            raise ValueError("no <org>/<repo> after the host")
        repo, root = "/".join(parts[:2]), "/".join(parts[2:])
    root = root.strip("/")
    if not repo or root == ".." or root.startswith("../"):
        raise ValueError("no repository, or a path out of it")
    return host.group(0), repo, root, ref


class KustomizeSources(Section):
    """Kustomize directories (a URL at a tag or commit, or a directory on the machine running Pulumi)."""

    snapshot_crds: str = Field(versions.KUSTOMIZE["snapshotCrds"], pattern=r"^\S+$")
    """The CSI snapshot CRDs (external-snapshotter; only with `rookCeph.snapshotController: install`)."""
    snapshot_controller: str = Field(versions.KUSTOMIZE["snapshotController"], pattern=r"^\S+$")
    """The CSI snapshot-controller (external-snapshotter; only with `rookCeph.snapshotController: install`)."""
    training_operator_v1: str = Field(versions.KUSTOMIZE["trainingOperatorV1"], pattern=r"^\S+$")
    """Kubeflow's v1 training operator, standalone overlay (with `training-operator-v1` in `training.operators`)."""

    def problems(self) -> list[Problem]:
        """A URL must be one kustomize parses, at a tag or commit (a branch moves); a local directory must exist."""
        found = []
        expected = "expected a URL at a tag or commit in kustomize's form (<host>/<org>/<repo>//<path>?ref=<tag>)"
        for key, where in self.model_dump(by_alias=True).items():
            if not _REMOTE.match(where):
                if not Path(where).is_dir():
                    expected_dir = "expected a URL at a tag or commit, or an existing directory"
                    hint = "a local path is read on the machine running Pulumi, relative to the project directory"
                    found.append(Problem(key, expected_dir, where, hint))
                continue
            try:
                host, repo, root, ref = repo_spec(where)
            except ValueError as why:
                found.append(Problem(key, expected, where, f"kustomize cannot split it: {why}"))
                continue
            if root.startswith("tree/"):  # GitHub's web form: kustomize would build a directory named tree/<tag>
                tag, _, path = root.removeprefix("tree/").partition("/")
                hint = f"kustomize reads no /tree/<tag>/ (a web page's form); write {host}{repo}//{path}?ref={tag}"
                found.append(Problem(key, expected, where, hint))
            elif not ref or ref in _BRANCHES:
                found.append(Problem(key, expected, where, "a branch moves under the stack; pin the mirror's tag"))
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
