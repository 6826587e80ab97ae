"""Amazon EFS: an existing file system (by id) serving tiers through the EKS add-on's CSI driver.

Each claim gets an EFS access point of its own (the driver's ``efs-ap`` provisioning): a directory under
``basePath`` named after the claim's namespace and name, owned by a POSIX id from the GID range, so a claim sees
only its directory. The driver is the Amazon EKS add-on ``aws-efs-csi-driver`` (IAM for its controller through
the add-on's role); the platform installs no chart and makes only the StorageClass. EFS is elastic (no size to
state or expand) and NFS: shared (RWX) reads at tens to hundreds of MB/s per client, priced per GiB-month stored
(docs/eks.md compares it with FSx for Lustre).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..common.sections import Problem, Section
from .backend import BuildContext, Group, Registration, Tier, TierClass

DRIVER = "efs.csi.aws.com"
FILE_SYSTEM_ID = r"^fs-[0-9a-f]{8,40}$"
"""An EFS file system id as the EFS API writes it (``fs-`` and 8 to 40 hex digits)."""
SUB_PATH_PATTERN = "${.PVC.namespace}/${.PVC.name}"
"""Each access point's directory under ``basePath``: the claim's namespace and name (the driver adds a unique
suffix, ``ensureUniqueDirectory``), so an operator can tell whose directory is whose."""


class EfsSettings(Section):
    """Amazon EFS: an existing file system the EKS add-on's CSI driver hands out as one access point per claim."""

    enabled: bool = False
    """Serve tiers from EFS (map them with `tiers.<tier>: efs`)."""
    file_system_id: str = Field("", pattern=rf"{FILE_SYSTEM_ID}|^$")
    """The file system's id (`fs-0123456789abcdef0`, `aws efs describe-file-systems`); required when enabled."""
    base_path: str = Field("/ai-storage", pattern=r"^/[A-Za-z0-9._/-]*$")
    """Directory of the file system under which each claim's access point directory is made."""
    directory_perms: str = Field("700", pattern=r"^[0-7]{3,4}$")
    """Permissions of each access point's root directory (octal)."""
    gid_range_start: int = Field(50000, ge=1, le=2**31 - 1)
    """First POSIX id the driver gives an access point (its uid and gid)."""
    gid_range_end: int = Field(7000000, ge=2, le=2**31 - 1)
    """Last POSIX id the driver gives an access point."""
    mount_options: list[str] = ["tls"]
    """Mount options of the volumes (`tls`: encrypted in transit; add `iam` when the file system's policy asks for
    IAM authorization)."""

    def problems(self) -> list[Problem]:
        """A file system id when on; a GID range with room."""
        found = []
        if self.enabled and not self.file_system_id:
            hint = "give the file system's id (aws efs describe-file-systems), or set efs.enabled: false"
            found.append(Problem("fileSystemId", "expected an EFS file system id (fs-...)", "", hint))
        if self.gid_range_end <= self.gid_range_start:
            expected = f"expected more than gidRangeStart ({self.gid_range_start})"
            found.append(Problem("gidRangeEnd", expected, self.gid_range_end, "widen the range"))
        return found


class EfsVolumes:
    """The EFS backend of a tier: access points on the stack's file system."""

    def __init__(self, settings: EfsSettings):
        self._settings = settings

    def tier_class(self, tier: Tier) -> TierClass:
        """Shared (RWX) NFS volumes, one access point each; nothing to expand (EFS is elastic)."""
        s = self._settings
        parameters = {
            "provisioningMode": "efs-ap",
            "fileSystemId": s.file_system_id,
            "directoryPerms": s.directory_perms,
            "gidRangeStart": str(s.gid_range_start),
            "gidRangeEnd": str(s.gid_range_end),
            "basePath": s.base_path,
            "subPathPattern": SUB_PATH_PATTERN,
            "ensureUniqueDirectory": "true",
        }
        return TierClass(
            provisioner=DRIVER,
            parameters=parameters,
            access_mode="ReadWriteMany",
            allow_expansion=False,
            mount_options=tuple(s.mount_options),
            devices=f"Amazon EFS file system {s.file_system_id}",
        )


def _held(settings: Any, tier: Tier) -> Group:
    """EFS grows with what it stores."""
    return Group("Amazon EFS (elastic)", None, "no bound", "efs.fileSystemId")


def _build(ctx: BuildContext) -> EfsVolumes:
    return EfsVolumes(ctx.settings.efs)


EFS = Registration("efs", "efs", ("warm", "cold", "checkpoint"), _build, _held)
"""Shared NFS (RWX) on an existing EFS file system: an access point per claim."""
