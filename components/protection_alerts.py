"""Alert rules of the data protection (metadata backup, checkpoint snapshots, offsite copies), from
kube-state-metrics' CronJob and Job series: a protection CronJob is stale when its last success is too old for its
schedule, and failed when its newest failed run started after its last success.
"""

from __future__ import annotations

from typing import Any

from .alert_settings import alert
from .checkpoints import OFFSITE_SUFFIX, SNAPSHOTS_SUFFIX
from .metadata_backup import BACKUP_CRONJOB

STALE_AFTER_RUNS = 2
"""A protection CronJob is stale when its last success is older than this many of its schedule's intervals."""
PROTECTION = {
    "MetadataBackup": (BACKUP_CRONJOB, "The JuiceFS metadata backup"),
    "CheckpointSnapshots": (f".+{SNAPSHOTS_SUFFIX}", "A checkpoint snapshot CronJob"),
    "CheckpointOffsite": (f".+{OFFSITE_SUFFIX}", "A checkpoint offsite copy CronJob"),
}
"""The data protection CronJobs by alert name prefix: the pattern of their names (the platform's and every
team's, in any namespace) and what they are."""


def protection_recording_rules() -> list[dict[str, Any]]:
    """Per protection CronJob (kube-state-metrics): the time of its last success (its creation while it has none),
    its schedule's interval (kube-state-metrics' next run, computed from the schedule, minus the last), and the
    start of its newest failed run."""
    names = "|".join(pattern for pattern, _ in PROTECTION.values())
    cronjob = f'{{cronjob=~"{names}"}}'
    created = f"kube_cronjob_created{cronjob}"
    owner = f'kube_job_owner{{owner_kind="CronJob",owner_name=~"{names}"}}'
    failed_start = (
        '(kube_job_status_start_time and on (namespace, job_name) (kube_job_failed{condition="true"} == 1))'
        f" * on (namespace, job_name) group_left (owner_name) {owner}"
    )
    return [
        {
            "record": "ai_storage:cronjob_last_success_time",
            "expr": f"max by (namespace, cronjob) (kube_cronjob_status_last_successful_time{cronjob} or {created})",
        },
        {
            "record": "ai_storage:cronjob_interval_seconds",
            "expr": f"max by (namespace, cronjob) (kube_cronjob_next_schedule_time{cronjob}"
            f" - (kube_cronjob_status_last_schedule_time{cronjob} or {created}))",
        },
        {
            "record": "ai_storage:cronjob_last_failure_time",
            "expr": "max by (namespace, cronjob)"
            f' (label_replace({failed_start}, "cronjob", "$1", "owner_name", "(.+)"))',
        },
    ]


def protection_alerts() -> list[dict[str, Any]]:
    """Each protection CronJob: stale when its last success is older than ``STALE_AFTER_RUNS`` intervals of its
    schedule, failed when its newest failed run started after its last success."""
    rules = []
    for prefix, (pattern, what) in PROTECTION.items():
        cronjob = f'{{cronjob=~"{pattern}"}}'
        rules += [
            alert(
                f"{prefix}Stale",
                f"time() - ai_storage:cronjob_last_success_time{cronjob}"
                f" > {STALE_AFTER_RUNS} * ai_storage:cronjob_interval_seconds{cronjob}",
                "critical",
                "5m",
                f"{what} has not succeeded for {STALE_AFTER_RUNS} of its scheduled intervals",
            ),
            alert(
                f"{prefix}Failed",
                f"ai_storage:cronjob_last_failure_time{cronjob} > ai_storage:cronjob_last_success_time{cronjob}",
                "warning",
                "1m",
                f"{what} failed its last run",
            ),
        ]
    return rules
