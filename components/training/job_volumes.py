"""A training job's extra volumes, and what the pods of a team's stack claim from each tier.

A volume is an OCI image (read-only, Kubernetes ``volumes[].image``), scratch space (a generic ephemeral volume
of a tier's class per pod, made and deleted with the pod) or a claim of the team's namespace (one its stack
creates, or one the platform vended: ``space``, a shared dataset). A node's directory (hostPath) is refused: the
restricted Pod Security Standard admits none. ``volume_problems`` checks a job's volumes against the pod's own
names and paths and the namespace's claims; ``tier_requests`` lists what the stack's claims and its pods'
per-pod claims request from each tier, for the namespace's quota (``quotas.over_quota``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from ..common import kube
from ..common.sections import DnsLabel, PinnedImage, Problem, Quantity, Section
from ..tiers.storage_tiers import Tier

SCRATCH_LABEL = "scratch"
"""The component label of scratch claims (``kube.labels``)."""
HOST_PATH_HINT = (
    "team namespaces enforce Pod Security restricted, which admits no hostPath volume (and a node's directory "
    "would tie the job to that node); for fast local data use the hot tier (staging, checkpoint.landing), for "
    "scratch space a job volume with scratch: {size, tier}"
)
ScratchTier = Literal["hot", "warm", "block"]


class ScratchSettings(Section):
    """A claim of its own for each pod, made with the pod and deleted with it (a generic ephemeral volume)."""

    size: Quantity
    """Size of each pod's scratch claim (counted against the namespace's quota of the tier, once per pod)."""
    tier: ScratchTier = "hot"
    """Tier of the claims: `hot` (node-local NVMe), `warm` (CephFS) or `block` (RBD); the class
    `<tierPrefix><tier>`."""


class JobVolume(Section):
    """An extra volume of every training pod: an image, scratch space, or a claim of the team's namespace."""

    name: DnsLabel
    """Volume name (unique in the pod)."""
    mount_path: str = Field(pattern=r"^/[^\s:]*$")
    """Where the container sees it (absolute)."""
    image: PinnedImage | None = None
    """An OCI image or artifact mounted read-only (Kubernetes `volumes[].image`): weights or a dataset shipped as
    an image, pinned by tag or digest."""
    scratch: ScratchSettings | None = None
    """Scratch space of each pod, read-write, gone with the pod."""
    claim: DnsLabel | None = None
    """A claim of the team's namespace: one this stack creates, or one the platform vended (`workspace.vendedClaims`:
    `space`, the team's writable space, or a shared dataset)."""
    read_only: bool = True
    """Mount the claim read-only (`claim` only; an image is always read-only, scratch always writable)."""
    host_path: str | None = None
    """Refused: a node's directory (see the error's hint for what to use)."""

    def problems(self) -> list[Problem]:
        """One source of the three; read-write only for a claim."""
        if self.host_path is not None:
            return [Problem("hostPath", "expected no hostPath volume", self.host_path, HOST_PATH_HINT)]
        given = [k for k, v in (("image", self.image), ("scratch", self.scratch), ("claim", self.claim)) if v]
        if len(given) != 1:
            hint = "an image (read-only), scratch (each pod's own, writable) or claim (of the team's namespace)"
            return [Problem("image", "expected one of image, scratch and claim", given or None, hint)]
        if not self.read_only and self.claim is None:
            hint = "an image is read-only, scratch is writable: readOnly applies to a claim"
            return [Problem("readOnly", "expected true (or unset) without claim", False, hint)]
        return []

    def spec(self, tier_prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The container's mount and the pod's volume."""
        mount = {"name": self.name, "mountPath": self.mount_path, "readOnly": self.read_only and not self.scratch}
        if self.image:
            return mount, {"name": self.name, "image": {"reference": self.image, "pullPolicy": "IfNotPresent"}}
        if self.claim:
            claim_ref = {"claimName": self.claim, "readOnly": self.read_only}
            return mount, {"name": self.name, "persistentVolumeClaim": claim_ref}
        assert self.scratch is not None  # problems()
        cls, labels = f"{tier_prefix}{self.scratch.tier}", kube.labels("training", SCRATCH_LABEL)
        return mount, kube.ephemeral_volume(self.name, cls, self.scratch.size, labels)


def volume_problems(
    volumes: Sequence[JobVolume], taken: dict[str, str], vended: Sequence[str], writable: str
) -> list[Problem]:
    """Each volume's name and path apart from the pod's own (``taken``: name to mount path) and from each
    other's; a claim among the ``vended`` ones (the pod's own claims are mounted already), read-only unless it is
    the ``writable`` one."""
    found, names, paths = [], dict(taken), set(taken.values())
    for i, v in enumerate(volumes):
        key = f"job.volumes[{i}]"
        if v.name in names:
            hint = "a volume's name is unique in the pod; the pod's own are " + ", ".join(sorted(taken))
            found.append(Problem(f"{key}.name", "expected a name no other volume of the pod has", v.name, hint))
        clash = sorted(p for p in paths if _overlap(p, v.mount_path))
        if clash:
            hint = "one mount would hide the other, or sit inside a read-only one: mount it at a path of its own"
            expected = f"expected a path apart from {', '.join(clash)}"
            found.append(Problem(f"{key}.mountPath", expected, v.mount_path, hint))
        names[v.name], paths = v.mount_path, paths | {v.mount_path}
        if v.claim is None:
            continue
        if v.claim not in vended:
            hint = (
                "the dataset and checkpoint claims are mounted at /data and /checkpoints already; another claim is "
                "one the platform vended: copy its stack output teamClaims.<team> into workspace.vendedClaims"
            )
            expected = (
                f"expected a claim the platform vended ({', '.join(vended) or 'workspace.vendedClaims is empty'})"
            )
            found.append(Problem(f"{key}.claim", expected, v.claim, hint))
        elif not v.read_only and v.claim != writable:
            hint = f"the platform vends datasets read-only; '{writable}' is the team's writable space"
            found.append(Problem(f"{key}.readOnly", "expected true for a vended dataset", False, hint))
    return found


def _overlap(a: str, b: str) -> bool:
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def pod_requests(volumes: Sequence[JobVolume], pods: int) -> list[tuple[str, Tier, list[str]]]:
    """What the job's scratch volumes claim: (settings key, tier, one size per pod)."""
    return [
        (f"job.volumes[{i}].scratch", v.scratch.tier, [v.scratch.size] * pods)
        for i, v in enumerate(volumes)
        if v.scratch is not None
    ]
