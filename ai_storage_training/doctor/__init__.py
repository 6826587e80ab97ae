"""``python -m ai_storage_training doctor``: what the storage under a training job does, judged against the
platform's thresholds. Read ``command.py`` first (the arguments, the run, the report), then the checks it runs:
``reads.py`` (sequential and random reads, read-ahead; ``fio.py`` when fio is installed), ``timing.py`` (test
checkpoints), ``juicefs.py`` (a JuiceFS mount's cache), ``checkpoints.py`` (a job's checkpoint directory), and
``report.py`` with ``thresholds.py`` (the verdict)."""

from .command import add_parser, diagnose, run

__all__ = ["add_parser", "diagnose", "run"]
