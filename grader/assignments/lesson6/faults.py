"""Fault injection for lesson 6: kill a sandboxed worker between steps or in the middle of a save.

The parent alone decides when to kill. Linux only (inotify): elsewhere the save kill is skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import stat
import struct
import threading
import zipfile
from pathlib import Path

IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE = 0x2, 0x8, 0x80, 0x100
ZIP_MAGIC = b"PK\x03\x04"  # what every torch.save file starts with
_EVENT = struct.Struct("iIII")


def open_regular(path: Path, flags: int = os.O_RDONLY) -> int:
    """A descriptor for ``path`` only if it is itself a regular file. The state folder is the
    learner's: a name there may be a symlink to any file (the parent runs as root), a FIFO that
    blocks an open, or a device. ``O_NOFOLLOW`` refuses the link, ``O_NONBLOCK`` the FIFO's wait,
    ``fstat`` everything that is not a plain file."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path.name} is not a regular file")
    return fd


def _whole_zip(fh) -> bool:
    try:
        with zipfile.ZipFile(fh) as archive:
            return archive.testzip() is None
    except (zipfile.BadZipFile, OSError, EOFError):
        return False


def incomplete(path: Path) -> bool:
    """True when ``path`` is not a complete zip archive (what ``torch.save`` writes), or not a
    regular file of its own (a link, a FIFO): read through a checked descriptor, never unpickled."""
    try:
        with os.fdopen(open_regular(path), "rb") as fh:
            return not _whole_zip(fh)
    except OSError:
        return True


def zip_start(path: Path) -> bool | None:
    """Whether ``path`` starts like a ``torch.save`` file; None when it is gone (renamed, removed)."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None
    except OSError:  # a link, a FIFO, a device: never a checkpoint the grader tears
        return False
    with os.fdopen(fd, "rb") as fh:
        return fh.read(len(ZIP_MAGIC)) == ZIP_MAGIC


class SaveWatcher:
    """Kills the worker at the first write of a checkpoint once armed. Only ``torch.save`` files
    count: a write to any other file first (a log line, a marker) would let the kill land before the
    real save and an in-place save go untested (a review found it: 12 points instead of 2)."""

    def __init__(self, directory: Path, kill) -> None:
        self.directory, self._kill = directory, kill
        self.events: list[tuple[int, str]] = []
        self.fired: str | None = None  # the file being written when the worker was killed
        self._gone: str | None = (
            None  # a written file renamed before it was read: judged by its target
        )
        self.armed = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._fd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            mask = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE
            if self._fd < 0 or libc.inotify_add_watch(self._fd, bytes(directory), mask) < 0:
                raise OSError(ctypes.get_errno(), "inotify")
        except (OSError, AttributeError):
            self.close()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="lesson6-watcher")
        if self.available:
            self._thread.start()

    @property
    def available(self) -> bool:
        return self._fd >= 0

    def arm(self) -> None:
        """Kill at the next write. Called while the worker waits for the parent's go-ahead, so every
        write it made before is already queued: drained here, never mistaken for the next save."""
        with self._lock:
            self._read(fire=False)
            self.armed = True

    def _read(self, fire: bool) -> None:
        try:
            data = os.read(self._fd, 1 << 16)
        except (BlockingIOError, OSError):
            return
        offset = 0
        while offset + _EVENT.size <= len(data):
            _, mask, _, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            text = name.decode(errors="replace")
            self.events.append((mask, text))
            if not (fire and self.armed and self.fired is None):
                continue
            if mask & IN_MODIFY:
                start = zip_start(self.directory / text)
                if start:
                    self._fire(text)
                elif start is None:  # an atomic save renamed before the watcher looked (load)
                    self._gone = text
            elif mask & IN_MOVED_TO and self._gone is not None and zip_start(self.directory / text):
                self._fire(self._gone)  # `tear` plants the torn temporary file it was

    def _fire(self, name: str) -> None:
        self.armed = False
        self.fired = name
        with contextlib.suppress(Exception):  # the main thread may be closing it too
            self._kill()

    def _watch(self) -> None:
        while not self._stop.is_set() and self._fd >= 0:
            try:
                ready, _, _ = select.select([self._fd], [], [], 0.05)
            except (OSError, ValueError):  # closed under us
                return
            if ready:
                with self._lock:
                    self._read(fire=True)

    def close(self) -> None:
        self._stop.set()
        if self._thread_started():
            self._thread.join(timeout=30)  # a kill in progress waits for the tree to die
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = -1

    def _thread_started(self) -> bool:
        return hasattr(self, "_thread") and self._thread.ident is not None

    def renamed_to(self) -> str | None:
        """The final name the interrupted file was renamed onto (if the rename happened)."""
        seen = False
        for mask, name in self.events:
            seen = seen or name == self.fired
            if seen and mask & IN_MOVED_TO and name != self.fired:
                return name
        return None


def kill_now(box) -> None:
    """SIGKILL the worker itself first (no delay), then everything in its cgroup/tree."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(box.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):  # the session may be closing (and removing) it at once
        box.kill()


def tear(directory: Path, watcher: SaveWatcher) -> str:
    """Leave the interrupted save torn; returns what the kill (or the parent) left, for the report.
    Every file operation goes through :func:`open_regular` (or ``O_EXCL | O_NOFOLLOW`` to create):
    a name the learner turned into a link or a FIFO is left alone, never followed."""
    name = watcher.fired
    if name is None:
        return ""
    path = directory / name
    try:
        fh = os.fdopen(open_regular(path, os.O_RDWR), "r+b")
    except OSError:
        fh = None
    if fh is not None:
        with fh:
            size = os.fstat(fh.fileno()).st_size
            if not _whole_zip(fh):
                return f"the kill landed mid-save: {name} left incomplete ({size:,} bytes)"
            os.ftruncate(fh.fileno(), size // 2)  # its bytes were all written when the kill landed
        return f"{name} was written but the grader cut it to {size // 2:,} bytes, as a kill mid-write leaves it"
    if os.path.lexists(path):
        return f"the kill interrupted a write to {name} (not a regular file: left alone)"
    final = watcher.renamed_to()
    if not final:
        return f"the kill interrupted a write to {name}"
    try:  # renamed already: plant the torn temporary file
        with os.fdopen(open_regular(directory / final), "rb") as src:
            data = src.read()
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError:
        return f"the kill interrupted a write to {name}"
    with os.fdopen(fd, "wb") as out:
        out.write(data[: len(data) // 2])
        with contextlib.suppress(OSError):
            info = os.stat(directory)
            os.fchown(out.fileno(), info.st_uid, info.st_gid)
    return (
        f"the save finished before the kill landed; the grader left half of it as {name}, "
        "as a kill mid-write would"
    )
