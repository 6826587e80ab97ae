"""One job writes a checkpoint directory at a time, and a launcher whose restart would fail is refused at start.

The job's claim: the coordinator of the job that writes a directory (``AsyncCheckpointer`` for the directory it
saves into, the ``Promoter`` for the durable one) holds ``flock`` on the directory's ``.job.lock`` for as long as it
writes there; the file names its host, pid, run id and start. A second job starting on the same directory is
refused at once, naming them (two jobs saving the same steps would fail each other's commits). Readers (``list``,
``restore-test``, the doctor, a restore) take no claim. The lock is the kernel's: it ends with the process, however
it ends; on a shared file system a lost node's lock ends when the file system expires that client's session (JuiceFS
and CephFS: minutes). Claims within one process are counted, so one job may hold several writers of a directory.

The launcher: torchrun with ``--max-restarts`` and its rendezvous store shared with the workers (PyTorch's default
since 2.5) hands a restarted attempt the previous attempt's addresses, and its process group fails to connect
(pytorch/pytorch#135712); :func:`check_launcher` refuses that at the first start, naming the setting that fixes it.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from . import layout
from .commit import CheckpointBusyError

SHARED_STORE_VARIABLE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
"""torchrun's switch (set to 1 in its environment) for a fresh rendezvous store per attempt."""

_held: dict[str, list[int]] = {}  # the directory's real path -> [descriptor, claims]
_guard = threading.Lock()


class DirectoryInUseError(CheckpointBusyError):
    """Another job holds the checkpoint directory's claim."""


class LauncherError(ValueError):
    """The job's launcher would fail its restarts."""


def check_launcher(environ: dict[str, str] | None = None) -> None:
    """:class:`LauncherError` when torchrun may restart this job (``TORCHELASTIC_MAX_RESTARTS`` > 0) with its store
    shared with the workers (``TORCHELASTIC_USE_AGENT_STORE=True``): that restart would fail to connect its group."""
    env = os.environ if environ is None else environ
    restarts = env.get("TORCHELASTIC_MAX_RESTARTS", "0")
    if restarts.isdigit() and int(restarts) > 0 and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        raise LauncherError(
            f"{SHARED_STORE_VARIABLE}: torchrun may restart this job (--max-restarts={restarts}) but shares its "
            "rendezvous store with the ranks, so a restarted attempt reads the previous one's addresses and fails "
            f"to connect (pytorch/pytorch#135712); set {SHARED_STORE_VARIABLE}=1 in torchrun's environment"
        )


def _is_coordinator(manager: Any) -> bool:
    """Rank 0: torch.distributed's when it is initialized (a DCP job's managers learn their rank at their first
    save), else the manager's."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return bool(dist.get_rank() == 0)
    return bool(getattr(manager, "is_coordinator", True))


def holder(directory: Path) -> str:
    """Who holds ``directory``'s claim, as its lock file says."""
    try:
        found = json.loads((directory / layout.JOB_LOCK).read_text())
        return f"host {found['host']}, pid {found['pid']}, run {found['run_id']}, since {found['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a job that has not recorded itself yet"


def held_by(directory: Path) -> str | None:
    """Who holds ``directory``'s claim now (:func:`holder`), or None: no job writes it."""
    try:
        fd = os.open(directory / layout.JOB_LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released at once (the close): only asks
    except BlockingIOError:
        return holder(directory)
    finally:
        os.close(fd)
    return None


def take(manager: Any) -> bool:
    """Claim ``manager.directory`` for this job on its coordinator (True: claimed; False: not the coordinator, or
    no directory); :class:`DirectoryInUseError` naming the holder when another job has it."""
    check_launcher()
    directory = getattr(manager, "directory", None)
    if directory is None or not _is_coordinator(manager):
        return False
    key = os.path.realpath(directory)
    with _guard:
        if key in _held:
            _held[key][1] += 1
            return True
        Path(directory).mkdir(parents=True, exist_ok=True)
        fd = os.open(Path(directory) / layout.JOB_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirectoryInUseError(
                f"checkpoint directory {directory} is in use by another job ({holder(Path(directory))}): give this "
                "job a directory of its own, or stop that job first (a job that is gone releases it with its process; "
                "one on a lost node when the file system expires its session)"
            ) from None
        run_id = getattr(manager, "_run_id", None) or os.environ.get("TORCHELASTIC_RUN_ID", "unknown")
        since = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        record = {"host": socket.gethostname(), "pid": os.getpid(), "run_id": run_id, "since": since}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        _held[key] = [fd, 1]
        return True


def release(manager: Any) -> None:
    """End one claim :func:`take` returned True for; the last one unlocks (the file stays: another client may have
    it open)."""
    key = os.path.realpath(manager.directory)
    with _guard:
        entry = _held.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _held[key]
            os.close(entry[0])
