"""The Ceph toolbox: a Deployment ``rook-ceph-tools`` in the cluster's namespace from which an operator runs the
``ceph`` and ``rados`` commands the docs and runbooks give (``kubectl -n rook-ceph exec deploy/rook-ceph-tools --
ceph status``), as Rook documents it (Troubleshooting, "Toolbox").

The pinned Ceph image runs a script of the platform's, as the platform's non-root user: it writes
``/etc/ceph/ceph.conf`` from the monitor addresses Rook keeps in the ConfigMap ``rook-ceph-mon-endpoints``
(``a=10.0.0.1:6789,b=...``) and the keyring from the Secret ``rook-ceph-mon`` (the admin user and key, as files),
and rewrites the config when the monitors move; it is ready once the config is written. It
holds the cluster's admin key: any user who may exec into pods of the namespace can act as Ceph's admin, as with
Rook's own toolbox; turn it off (``rookCeph.toolbox.enabled: false``) where that is not wanted.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from ..common import kube, versions
from ..common.sections import Resources, Section

NAME = "rook-ceph-tools"
SCRIPT = """set -eu
conf=/etc/ceph/ceph.conf
write_conf() {
  hosts=$(sed -e 's/[^=,]*=//g' /etc/rook/mon-endpoints)
  printf '[global]\\nmon_host = %s\\n\\n[client.admin]\\nkeyring = /etc/ceph/keyring\\n' "$hosts" > "$conf.new"
  mv "$conf.new" "$conf"
}
user=$(cat /var/lib/rook-ceph-mon/username)
printf '[%s]\\nkey = %s\\n' "$user" "$(cat /var/lib/rook-ceph-mon/secret.keyring)" > /etc/ceph/keyring
write_conf
seen=$(cat /etc/rook/mon-endpoints)
while sleep 10; do
  now=$(cat /etc/rook/mon-endpoints)
  if [ "$now" != "$seen" ]; then write_conf; seen=$now; fi
done
"""
"""Writes the config and keyring, then follows the monitors' addresses (the ConfigMap volume is updated in place)."""


class ToolboxSettings(Section):
    """The Ceph toolbox Deployment (`rook-ceph-tools`) the docs' `ceph` commands run in."""

    enabled: bool = True
    """Deploy it (it holds Ceph's admin key: whoever may exec into the namespace's pods is Ceph's admin)."""
    resources: Resources = Resources(cpu_request="50m", memory_request="64Mi", memory_limit="512Mi")
    """Requests and limits of its container."""


def toolbox(
    name: str, namespace: pulumi.Input[str], s: ToolboxSettings, parent: pulumi.Resource, after: list[pulumi.Resource]
) -> k8s.apps.v1.Deployment:
    """The toolbox Deployment in ``namespace`` (created after the CephCluster: Rook makes the Secret and ConfigMap)."""
    labels = {"app": NAME, **kube.labels("ceph-toolbox", "tools")}
    ready = {"exec": {"command": ["test", "-s", "/etc/ceph/ceph.conf"]}, "periodSeconds": 30}
    container = kube.container(
        NAME,
        versions.CEPH_IMAGE,
        s.resources,
        command=["/bin/sh", "-c", SCRIPT],
        readinessProbe=ready,
        livenessProbe=ready,
        volumeMounts=[
            {"name": "ceph-config", "mountPath": "/etc/ceph"},
            {"name": "mon-endpoints", "mountPath": "/etc/rook", "readOnly": True},
            {"name": "admin-key", "mountPath": "/var/lib/rook-ceph-mon", "readOnly": True},
        ],
    )
    volumes = [
        {"name": "ceph-config", "emptyDir": {}},
        {
            "name": "mon-endpoints",
            "configMap": {"name": "rook-ceph-mon-endpoints", "items": [{"key": "data", "path": "mon-endpoints"}]},
        },
        {
            "name": "admin-key",
            "secret": {
                "secretName": "rook-ceph-mon",
                "items": [
                    {"key": "ceph-secret", "path": "secret.keyring"},
                    {"key": "ceph-username", "path": "username"},
                ],
            },
        },
    ]
    template = kube.pod_template(labels, [container], volumes)
    kube.ingress_policy(
        f"{name}-no-ingress", namespace, kube.labels("ceph-toolbox", "tools"), [], parent
    )  # serves nothing
    return k8s.apps.v1.Deployment(
        name,
        metadata=kube.workload_metadata(NAME, namespace, s.resources, labels),
        spec={"replicas": 1, "selector": {"matchLabels": {"app": NAME}}, "template": template},
        opts=pulumi.ResourceOptions(parent=parent, depends_on=after),
    )
