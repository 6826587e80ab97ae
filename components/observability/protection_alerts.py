"""Alert rules of the data protection (metadata backup, checkpoint snapshots, offsite copies, restore tests), from
kube-state-metrics' CronJob and Job series: a protection CronJob is stale when its last success is too old for its
schedule, and failed when its newest failed run started after its last success. A checkpoint claim's restore test
is overdue when its last success (its CronJob's, or the time a training job reports,
``ai_storage_checkpoint_restore_test_timestamp_seconds``) is older than a threshold in hours.
"""

from __future__ import annotations

from typing import Any

from ..protection.checkpoint_restore import RESTORE_TEST_SUFFIX
from ..protection.checkpoints import OFFSITE_SUFFIX, SNAPSHOTS_SUFFIX
from ..protection.metadata_backup import BACKUP_CRONJOB
from .alert_settings import RuleSettings, alert, levels

STALE_AFTER_RUNS = 2
"""A protection CronJob is stale when its last success is older than this many of its schedule's intervals."""
PROTECTION = {
    "MetadataBackup": (BACKUP_CRONJOB, "The JuiceFS metadata backup"),
    "CheckpointSnapshots": (f".+{SNAPSHOTS_SUFFIX}", "A checkpoint snapshot CronJob"),
    "CheckpointOffsite": (f".+{OFFSITE_SUFFIX}", "A checkpoint offsite copy CronJob"),
}
"""The data protection CronJobs by alert name prefix: the pattern of their names (the platform's and every
team's, in any namespace) and what they are."""
RESTORE_TEST = ("CheckpointRestoreTest", f".+{RESTORE_TEST_SUFFIX}", "A checkpoint restore test CronJob")
"""The restore test CronJobs (every team's): alert name prefix, pattern of their names, what they are."""


def protection_recording_rules() -> list[dict[str, Any]]:
    """Per protection CronJob (kube-state-metrics): the time of its last success (its creation while it has none),
    its schedule's interval (kube-state-metrics' next run, computed from the schedule, minus the last), and the
    start of its newest failed run."""
    names = "|".join([*(pattern for pattern, _ in PROTECTION.values()), RESTORE_TEST[1]])
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
            failed_alert(prefix, pattern, what),
        ]
    return rules


def failed_alert(prefix: str, pattern: str, what: str) -> dict[str, Any]:
    """``<prefix>Failed``: the newest failed run of a CronJob named ``pattern`` started after its last success."""
    cronjob = f'{{cronjob=~"{pattern}"}}'
    return alert(
        f"{prefix}Failed",
        f"ai_storage:cronjob_last_failure_time{cronjob} > ai_storage:cronjob_last_success_time{cronjob}",
        "warning",
        "1m",
        f"{what} failed its last run",
    )


def restore_test_rules(s: RuleSettings) -> list[dict[str, Any]]:
    """The last successful restore test of each claim (its CronJob's last success, its creation while it has none;
    or the time a training job reports), overdue above ``restoreTestAgeHours``; a failed restore test (its
    checkpoint refused, or an error) right away."""
    prefix, pattern, what = RESTORE_TEST
    reported = "ai_storage_checkpoint_restore_test_timestamp_seconds"
    return [
        {
            "record": "ai_storage:checkpoint_restore_test_last_success_time",
            "expr": f'ai_storage:cronjob_last_success_time{{cronjob=~"{pattern}"}} or ({reported} != 0)',
        },
        *levels(
            f"{prefix}Overdue",
            "(time() - ai_storage:checkpoint_restore_test_last_success_time) / 3600",
            s.thresholds.restore_test_age_hours,
            "5m",
            "No successful checkpoint restore test for more than {level} h",
        ),
        failed_alert(prefix, pattern, what),
    ]
