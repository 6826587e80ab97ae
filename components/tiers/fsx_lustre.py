"""Amazon FSx for Lustre: a file system per claim, made by the EKS add-on's CSI driver.

The driver (the Amazon EKS add-on ``aws-fsx-csi-driver``, IAM through the add-on's role) provisions a new Lustre
file system for each claim on the tier's StorageClass, in the stack's subnet and security groups, sized by the
claim (rounded up to Lustre's steps: 1.2 TiB, then 2.4 TiB steps for SSD). It mounts a whole file system per
volume, so claims cannot share an existing one and stay apart: each team's claim is its own file system (an
existing file system is mounted by a PersistentVolume of your own, docs/eks.md). The platform installs no chart
and makes only the StorageClass. Lustre is for throughput: hundreds of MB/s per TiB and many clients at once, with
small files cheap on its metadata servers; priced per GiB-month provisioned (docs/eks.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from ..common.sections import Problem, Section
from .backend import BuildContext, Group, Registration, Tier, TierClass

DRIVER = "fsx.csi.aws.com"
THROUGHPUT = {"PERSISTENT_2": (125, 250, 500, 1000), "PERSISTENT_1": (50, 100, 200)}
"""MB/s per TiB a persistent SSD file system may be created with (the FSx API's values per deployment type)."""
SubnetId = Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")]
SecurityGroupId = Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")]


class FsxLustreSettings(Section):
    """Amazon FSx for Lustre: a file system per claim, made by the EKS add-on's CSI driver."""

    enabled: bool = False
    """Serve tiers from FSx for Lustre (map them with `tiers.<tier>: fsx-lustre`)."""
    subnet_id: SubnetId | None = None
    """The subnet each file system is made in (one of the cluster's private subnets); required when enabled."""
    security_group_ids: list[SecurityGroupId] = []
    """Security groups of each file system: they must admit the nodes on TCP 988 (and 1018-1023); one or more."""
    deployment_type: Literal["PERSISTENT_2", "PERSISTENT_1", "SCRATCH_2", "SCRATCH_1"] = "PERSISTENT_2"
    """`PERSISTENT_*` keep data through a server failure (replicated within the zone); `SCRATCH_*` do not (a
    scratch file system suits only data copied from elsewhere)."""
    per_unit_storage_throughput: int | None = 250
    """MB/s per TiB of storage (`PERSISTENT_2`: 125, 250, 500 or 1000; `PERSISTENT_1`: 50, 100 or 200; none for
    scratch)."""
    data_compression_type: Literal["LZ4", "NONE"] = "LZ4"
    """Compression of the stored data (LZ4 costs little CPU and often halves the space)."""
    file_system_type_version: Literal["2.15", "2.12", "2.10"] = "2.15"
    """Lustre version of new file systems."""
    kms_key_id: str | None = Field(None, pattern=r"^(arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/)?[A-Za-z0-9-]+$")
    """KMS key that encrypts persistent file systems at rest (unset: the FSx service key)."""
    mount_options: list[str] = ["flock"]
    """Mount options of the volumes (`flock`: POSIX locks across clients, as AWS mounts Lustre)."""

    def problems(self) -> list[Problem]:
        """A subnet and security groups when on; a throughput the deployment type offers."""
        found = []
        if self.enabled and self.subnet_id is None:
            hint = "name one of the cluster's private subnets, or set fsxLustre.enabled: false"
            found.append(Problem("subnetId", "expected a subnet id (subnet-...)", None, hint))
        if self.enabled and not self.security_group_ids:
            hint = "a group that admits the nodes on TCP 988"
            found.append(Problem("securityGroupIds", "expected one or more security group ids (sg-...)", [], hint))
        allowed = THROUGHPUT.get(self.deployment_type, ())
        if self.per_unit_storage_throughput not in (allowed or (None,)):
            expected = f"expected one of {', '.join(map(str, allowed))}" if allowed else "expected none for scratch"
            hint = f"the throughputs {self.deployment_type} offers"
            found.append(Problem("perUnitStorageThroughput", expected, self.per_unit_storage_throughput, hint))
        return found


class LustreFileSystems:
    """The FSx for Lustre backend of a tier: a file system per claim."""

    def __init__(self, settings: FsxLustreSettings):
        self._settings = settings

    def tier_class(self, tier: Tier) -> TierClass:
        """Shared (RWX) Lustre, one file system per claim; the driver grows one when its claim grows."""
        s = self._settings
        parameters = {
            "subnetId": str(s.subnet_id),
            "securityGroupIds": ",".join(s.security_group_ids),
            "deploymentType": s.deployment_type,
            "dataCompressionType": s.data_compression_type,
            "fileSystemTypeVersion": s.file_system_type_version,
        }
        if s.per_unit_storage_throughput is not None:
            parameters["perUnitStorageThroughput"] = str(s.per_unit_storage_throughput)
        if s.kms_key_id is not None:
            parameters["kmsKeyId"] = s.kms_key_id
        return TierClass(
            provisioner=DRIVER,
            parameters=parameters,
            access_mode="ReadWriteMany",
            allow_expansion=True,
            mount_options=tuple(s.mount_options),
            devices=f"an FSx for Lustre file system per claim ({s.deployment_type}, subnet {s.subnet_id})",
        )


def _held(settings: Any, tier: Tier) -> Group:
    """Each claim is a file system of its own size."""
    return Group("Amazon FSx for Lustre (a file system per claim)", None, "no bound", "fsxLustre.subnetId")


def _build(ctx: BuildContext) -> LustreFileSystems:
    return LustreFileSystems(ctx.settings.fsx_lustre)


FSX_LUSTRE = Registration("fsx-lustre", "fsx_lustre", ("hot", "warm", "cold", "checkpoint"), _build, _held)
"""Shared Lustre (RWX): a file system per claim."""
