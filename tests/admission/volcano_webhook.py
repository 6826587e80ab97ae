"""What Volcano v1.15.1's job admission webhook (the admission the pinned chart installs: ``custom.admission_enable``
true, ``vap_enable`` false) checks beyond its ValidatingAdmissionPolicies, upstream's CEL port of the same rules
with the same messages (``../shared/upstream/volcano/policy``, evaluated in test_volcano_policies.py): what needs
other objects or Go (``validateJobCreate``, pkg/webhooks/admission/jobs/validate/admit_job.go): the job's queue
exists and is Open, each plugin is one the job controller builds, each pod's name is a qualified name, and the mpi
plugin's master and worker tasks exist. It judges the job as the mutating webhook leaves it
(``admitted_volcano_job``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tests.operators import admitted_volcano_job

PLUGINS = {"ssh", "env", "svc", "tensorflow", "mpi", "pytorch"}
"""The plugins the job controller registers (pkg/controllers/job/plugins/factory.go; pytorch with v1.15)."""
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _qualified(name: str) -> bool:
    """``validation.IsQualifiedName`` without a prefix: at most 63 characters of the name pattern."""
    return len(name) <= 63 and bool(_QUALIFIED.match(name))


def webhook_refusals(job: Mapping[str, Any], queues: Sequence[Mapping[str, Any]]) -> list[str]:
    """The webhook's messages for ``job`` (a Volcano Job) given the cluster's ``queues``; [] when it admits it."""
    admitted = admitted_volcano_job(job)
    spec, name = admitted["spec"], admitted["metadata"]["name"]
    found = []
    for index, task in enumerate(spec["tasks"]):
        pod = f"{name}-{task['name']}-{index}"  # jobhelpers.MakePodName, with the task's index as the webhook has it
        if not _qualified(pod):
            found.append(f"create pod with name {pod} validate failed")
    found += [f"unable to find job plugin: {p}" for p in sorted(spec.get("plugins") or {}) if p not in PLUGINS]
    if "mpi" in (spec.get("plugins") or {}):
        args = " ".join(spec["plugins"]["mpi"] or [])
        tasks = {t["name"] for t in spec["tasks"]}
        for role, default in (("master", "master"), ("worker", "worker")):
            wanted = re.search(rf"--{role}=(\S+)", args)
            if (wanted.group(1) if wanted else default) not in tasks:
                found.append(f"The specified mpi {role} task was not found")
    queue = next((q for q in queues if q["metadata"]["name"] == spec["queue"]), None)
    if queue is None:
        found.append(f"unable to find job queue: {spec['queue']}")
    elif (queue.get("status") or {}).get("state", "Open") != "Open":
        found.append(f"can only submit job to queue with state `Open`, queue `{spec['queue']}`")
    return found
