"""Peak memory of a run: CUDA's allocator peak on a GPU, the process's resident-set peak on a CPU.

``reset_peak_memory`` starts a new peak, ``peak_memory_bytes`` reads it. On a Linux CPU the reset clears
``VmHWM`` where the kernel allows it, else a thread samples the resident set every few ms; a reset first hands
freed heap pages back (``malloc_trim``) so a run does not inherit the last one's. RSS includes the interpreter:
compare recipes, not absolute sizes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import resource
import sys
import threading
from pathlib import Path

import torch

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_SAMPLE_SECONDS = 0.002


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _current_rss_bytes() -> int | None:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


class _RssSampler:
    """A daemon thread keeping the maximum resident set seen since ``restart``."""

    def __init__(self) -> None:
        self._peak = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="effkit-rss-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stop = threading.Event()  # never set: the thread lives as long as the process
        while not stop.wait(_SAMPLE_SECONDS):
            self.observe()

    def observe(self) -> int:
        rss = _current_rss_bytes() or 0
        with self._lock:
            self._peak = max(self._peak, rss)
            return self._peak

    def restart(self) -> None:
        with self._lock:
            self._peak = _current_rss_bytes() or 0


_sampler: _RssSampler | None = None


def _return_freed_heap() -> None:
    """Give freed heap pages back to the OS, so the resident set a new peak starts from is live
    memory: glibc keeps freed chunks mapped (and a later run's allocations reuse them unseen)."""
    gc.collect()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass  # not glibc (macOS, musl): nothing to trim this way


def _kernel_reset_works() -> bool:
    """Reset VmHWM through clear_refs and check that the kernel really did it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    hwm, rss = _status_kib("VmHWM"), _status_kib("VmRSS")
    # after a real reset the mark sits at the current resident set (allow 16 MiB of growth since)
    return hwm is not None and rss is not None and hwm <= rss + 16 * 1024


def reset_peak_memory(device: torch.device | str = "cpu") -> str:
    """Start a new peak. Returns how the CPU peak will be tracked: ``"kernel"`` (VmHWM reset),
    ``"sampled"`` (the reset was refused or ignored: an RSS sampler thread) or ``"cuda"``."""
    global _sampler
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        return "cuda"
    _return_freed_heap()
    if _sampler is None and _kernel_reset_works():
        return "kernel"
    if _current_rss_bytes() is None:
        return "process"  # not Linux: the peak since the process started is all there is
    if _sampler is None:
        _sampler = _RssSampler()
    _sampler.restart()
    return "sampled"


def peak_memory_bytes(device: torch.device | str = "cpu") -> int:
    """Peak memory in bytes since the last ``reset_peak_memory`` (on a CPU without /proc: since the
    process started)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.max_memory_allocated(dev))
    if _sampler is not None:
        return _sampler.observe()
    hwm = _status_kib("VmHWM")
    if hwm is not None:
        return hwm * 1024
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB
