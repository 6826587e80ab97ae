"""Model artifacts: where a team publishes the models it trained, and who may read them.

A trained model is neither training data nor a checkpoint: checkpoint retention rotates checkpoints and the
offsite copy treats them as such, so models get a location of their own in the platform's bucket,
``artifacts/<team>/<model>/<version>/`` (published by ``ai_storage_training.artifacts.publish``: files copied
with CRC32C, the manifest last, a published version never overwritten). The bucket keeps object versions on S3
and is retained on ``pulumi destroy`` in protected stacks, like every stateful resource; no lifecycle rule of
the platform expires ``artifacts/``.

For each team with ``artifacts`` on, the platform delivers into its namespace the ServiceAccount ``artifacts``,
the Secret ``artifacts-credentials`` (keys that write only ``artifacts/<team>/``; under IRSA the role on the
ServiceAccount instead) and the ConfigMap ``artifacts-target``. Each namespace in the team's
``artifactReaders`` (the services that serve its models) gets the same three, named ``artifacts-<team>``,
``artifacts-<team>-credentials`` and ``artifacts-<team>-target``, with keys that only list and read that
prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from ..common import kube
from ..tiers.object_store import ObjectStore
from .quotas import TEAM_LABEL

PREFIX = "artifacts/"
"""Key prefix of every team's published models."""
ACCOUNT = "artifacts"
"""ServiceAccount a team's publishing pods run as."""
CREDENTIALS = "artifacts-credentials"
"""Secret with the team's write keys (none under IRSA)."""
TARGET = "artifacts-target"
"""ConfigMap naming where the team's artifacts go: `url`, `sync-flags`, `endpoint`, `bucket`, `prefix`."""


def team_prefix(team: str) -> str:
    """The key prefix a team publishes under."""
    return f"{PREFIX}{team}/"


def reader_names(team: str) -> tuple[str, str, str]:
    """(ServiceAccount, Secret, ConfigMap) of a reader namespace's access to ``team``'s artifacts."""
    return f"artifacts-{team}", f"artifacts-{team}-credentials", f"artifacts-{team}-target"


def vend(
    name: str,
    team: str,
    namespace: str,
    readers: Sequence[str],
    store: ObjectStore,
    opts: pulumi.ResourceOptions,
    reader_opts: Mapping[str, pulumi.ResourceOptions],
) -> None:
    """The team's write access to its prefix in ``namespace``, and read-only access in each of ``readers``
    (created with ``reader_opts[reader]`` when given, e.g. waiting for a namespace the platform vends)."""
    prefix = team_prefix(team)
    labels = {**kube.labels("artifacts", team), TEAM_LABEL: team}
    access = store.scoped_access(f"artifacts-{team}", prefix, (namespace, ACCOUNT))
    store.deliver(f"{name}-artifacts", access, namespace, (ACCOUNT, CREDENTIALS, TARGET), labels, opts)
    for index, reader in enumerate(readers):
        names = reader_names(team)
        scope = f"artifacts-{team}-read-{index}"
        read = store.scoped_access(scope, prefix, (reader, names[0]), read_only=True)
        where = reader_opts.get(reader, pulumi.ResourceOptions(parent=opts.parent))
        store.deliver(f"{name}-artifacts-reader-{reader}", read, reader, names, labels, where)
