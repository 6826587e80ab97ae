"""Staging: copy a dataset version from the cold tier onto a node-local hot-tier volume before training.

The design's init-container pattern, with the manifest checksum in the job: an init container runs the team's
job image with ``python -m ai_storage_training stage`` (docs/training.md), which copies the version's shards from
the dataset claim (``/data/<source>/<version>``) onto the hot volume at ``/staged``, checks every shard's CRC32C
against the manifest (and the manifest against ``manifestSha256`` when set), writes the manifest last, and exits
non-zero on any mismatch, so the pod never starts training on a bad copy; a volume that already holds the
verified version is not copied again. The trainer container mounts the staged copy read-only and finds it in
``AI_STORAGE_DATASET_DIR`` (and the expected checksum in ``AI_STORAGE_DATASET_MANIFEST_SHA256``).

The hot volume is a generic ephemeral volume of the ``<prefix>hot`` class (a claim per pod, deleted with it,
counted against the namespace's hot-tier quota), or a hot-tier claim the team names (kept between jobs, so a
second job skips the copy). A team's Volcano Job stages with ``TeamSettings.staging``; a TrainJob cannot add an
init container (Trainer v2.3's runtime patches set only the env, mounts and securityContext of the runtime's
own), so a platform runtime stages for its TrainJobs with ``training.runtimes[].staging``.
"""

from __future__ import annotations

import posixpath
from typing import Any

from pydantic import Field

from ..common import kube
from ..common.sections import DnsLabel, Problem, Quantity, Resources, Section

DATA_PATH = "/data"
"""Where a job's pods mount the dataset claim (the training runtimes and team jobs alike)."""
DATA_VOLUME = "data"
INIT_CONTAINER = "stage-dataset"
"""Name of the init container that stages the dataset."""
STAGED_VOLUME = "staged"
STAGED_PATH = "/staged"
"""Where the hot volume is mounted (in the init container, and read-only in the trainer container)."""
DATASET_DIR_ENV = "AI_STORAGE_DATASET_DIR"
MANIFEST_ENV = "AI_STORAGE_DATASET_MANIFEST_SHA256"
RELATIVE_PATH = r"^([A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*)?$"
"""A relative path whose parts start with a letter, digit, '_' or '-' (no '..', no hidden names), or empty."""
VERSION = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""A dataset version's directory name (as `python -m ai_storage_training pack` accepts it)."""


class StagingSettings(Section):
    """Stage a dataset version onto a node-local hot-tier volume before training (an init container)."""

    enabled: bool = False
    """Stage the dataset version before the trainer starts (off: the pods read `/data` directly)."""
    source: str = Field("", pattern=RELATIVE_PATH)
    """Directory of the dataset's versions inside the dataset claim (`/data/<source>/<version>`); empty: its root."""
    version: str | None = Field(None, pattern=VERSION)
    """Dataset version to stage (its directory name, holding `manifest.json` and the shards)."""
    manifest_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    """SHA-256 (hex) of the version's `manifest.json`: staging and the reader refuse any other manifest."""
    size: Quantity = "100Gi"
    """Size of the hot-tier volume the version is staged onto (counted against the hot-tier quota, per pod)."""
    claim: DnsLabel | None = None
    """A hot-tier claim to stage onto (kept between jobs); unset: a generic ephemeral volume per pod."""
    resources: Resources = Resources(cpu_request="500m", memory_request="256Mi", memory_limit="1Gi")
    """Requests and limits of the init container (the namespace's LimitRange applies to what is unset)."""

    def problems(self) -> list[Problem]:
        """A version to stage."""
        if self.enabled and self.version is None:
            hint = "name the version directory under /data/<source> that holds manifest.json"
            return [Problem("version", "expected a dataset version with enabled: true", None, hint)]
        return []

    @property
    def source_dir(self) -> str:
        """The version's directory on the dataset claim, as the pods mount it."""
        return posixpath.join(DATA_PATH, self.source, self.version or "")

    @property
    def dataset_dir(self) -> str:
        """Where the staged copy is, as the pods mount the hot volume."""
        return posixpath.join(STAGED_PATH, self.source, self.version or "")


def stage_command(s: StagingSettings) -> list[str]:
    """The init container's command (docs/training.md, `stage`)."""
    command = ["python", "-m", "ai_storage_training", "stage", "--source", s.source_dir, "--dest", s.dataset_dir]
    return command + (["--manifest-sha256", s.manifest_sha256] if s.manifest_sha256 else [])


def trainer_env(s: StagingSettings) -> list[dict[str, str]]:
    """What tells the training library where the staged copy is (and which manifest to expect)."""
    env = [{"name": DATASET_DIR_ENV, "value": s.dataset_dir}]
    return env + ([{"name": MANIFEST_ENV, "value": s.manifest_sha256}] if s.manifest_sha256 else [])


def staged_volume(s: StagingSettings, tier_prefix: str) -> dict[str, Any]:
    """The hot volume: the named claim, or a generic ephemeral volume of the hot class."""
    if s.claim:
        return {"name": STAGED_VOLUME, "persistentVolumeClaim": {"claimName": s.claim}}
    labels = kube.labels("dataset-staging", "hot-volume")
    return kube.ephemeral_volume(STAGED_VOLUME, f"{tier_prefix}hot", s.size, labels)


def init_container(s: StagingSettings, image: str, uid: int) -> dict[str, Any]:
    """The staging init container: the job's image, the dataset read-only, the hot volume, restricted."""
    return {
        "name": INIT_CONTAINER,
        "image": image,
        "command": stage_command(s),
        "resources": s.resources.spec(),
        "volumeMounts": [
            {"name": DATA_VOLUME, "mountPath": DATA_PATH, "readOnly": True},
            {"name": STAGED_VOLUME, "mountPath": STAGED_PATH},
        ],
        "securityContext": kube.restricted_container(uid),
    }


def stage_into(pod_spec: dict[str, Any], s: StagingSettings, image: str, uid: int, tier_prefix: str) -> None:
    """Add staging to a pod's spec: the init container (running as ``uid``, the pod's fsGroup unless it has one),
    the hot volume, and the staged copy (read-only) and its variables in every container."""
    pod_spec["initContainers"] = [init_container(s, image, uid)]
    pod_spec.setdefault("securityContext", {}).setdefault("fsGroup", uid)  # the volume is writable by ``uid``
    pod_spec["volumes"].append(staged_volume(s, tier_prefix))
    for container in pod_spec["containers"]:
        container["env"] = [*container.get("env", []), *trainer_env(s)]
        container["volumeMounts"].append({"name": STAGED_VOLUME, "mountPath": STAGED_PATH, "readOnly": True})
