"""The job's GPU as NVML sees it (busy fraction, memory in use), for the step timer's figures and the metrics.

NVML comes from ``nvidia-ml-py`` (the ``gpu`` extra, module ``pynvml``). The GPU is the one PyTorch uses in this
process (``torch.cuda.current_device()``, found in NVML by its UUID, so ``CUDA_VISIBLE_DEVICES`` is respected);
without PyTorch's CUDA, NVML or a GPU there is no figure, and ``reason`` says why.
"""

from __future__ import annotations

import sys
from typing import Any

from . import metrics


class GpuSampler:
    """``sample()``: (busy fraction 0-1, memory used in bytes) of this process's GPU now, or None (see ``reason``)."""

    def __init__(self) -> None:
        self.reason = ""
        """Why there is no GPU figure (empty when there is one)."""
        self._nvml: Any = None
        self._handle: Any = None
        torch = sys.modules.get("torch")  # never imported here: a job without PyTorch has no CUDA device of ours
        if torch is None or not torch.cuda.is_available():
            self.reason = "no CUDA device in this process (PyTorch's torch.cuda.is_available() is False)"
            return
        try:
            import pynvml
        except ImportError:
            self.reason = "NVML is not installed (pip install 'ai-storage-training[gpu]': nvidia-ml-py)"
            return
        try:
            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
            self._handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            self._nvml = pynvml
        except pynvml.NVMLError as e:
            self.reason = f"NVML cannot read the GPU ({e})"

    def sample(self) -> tuple[float, int] | None:
        if self._nvml is None:
            return None
        try:
            busy = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu / 100.0
            used = int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        except self._nvml.NVMLError as e:
            self.reason, self._nvml = f"NVML stopped answering ({e})", None
            return None
        metrics.GPU_UTILIZATION.set(busy)
        metrics.GPU_MEMORY_USED.set(used)
        return busy, used
