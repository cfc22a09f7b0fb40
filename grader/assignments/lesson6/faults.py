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
IN_ONLYDIR, IN_DONT_FOLLOW, IN_ISDIR = 0x01000000, 0x02000000, 0x40000000
MAX_FOLDERS, MAX_DEPTH = 32, 4  # folders watched inside the state folder (inotify is not recursive)
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


def _parent_fd(directory: Path, name: str) -> tuple[int, str]:
    """A descriptor of the folder holding ``name`` (relative to ``directory``), reached one folder at
    a time with ``O_NOFOLLOW``: a folder of the learner's swapped for a link never leads the root
    parent out of the state folder. Returns it with the last part of ``name``."""
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise OSError(f"{name}: not a plain relative path")
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            inner = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = inner
    except OSError:
        os.close(fd)
        raise
    return fd, parts[-1]


def open_under(directory: Path, name: str, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """``open_regular`` for ``name`` relative to ``directory`` (see ``_parent_fd``); with
    ``os.O_CREAT`` it creates (callers add ``O_EXCL``)."""
    fd, last = _parent_fd(directory, name)
    try:
        out = os.open(last, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(out).st_mode):
        os.close(out)
        raise OSError(f"{name} is not a regular file")
    return out


def size_under(directory: Path, name: str) -> int | None:
    """The bytes written to a regular file ``name`` under ``directory``; None when it is gone
    (renamed, removed); 0 for anything that is no plain file (never a checkpoint the grader tears)."""
    try:
        fd = open_under(directory, name)
    except FileNotFoundError:
        return None
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        # bytes written, not the size claimed: a sparse file (``truncate(3_000_000)``) costs nothing
        return min(st.st_size, st.st_blocks * 512)
    finally:
        os.close(fd)


class SaveWatcher:
    """Kills the worker once armed, at the first write that makes a file in the state folder (or a
    folder inside it) ``min_bytes`` or larger: a checkpoint holds the model's weights, whatever its
    format. A smaller write first (a log line, a marker, a small decoy) used to draw the kill away from
    the real save and let an in-place save go untested (a review found it: 12 points instead of 2)."""

    def __init__(self, directory: Path, kill, min_bytes: int = 1) -> None:
        self.directory, self._kill, self.min_bytes = directory, kill, min_bytes
        self.events: list[tuple[int, str]] = []  # (mask, path relative to the state folder)
        self._folders: dict[
            int, str
        ] = {}  # watch descriptor -> folder relative to the state folder
        self.fired: str | None = None  # the file being written when the worker was killed
        self.finished: set[str] = set()  # fired on, but found already in place (a renamed folder)
        self._gone: str | None = (
            None  # a written file renamed before it was read: judged by its target
        )
        self.armed = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._fd = -1
        try:
            self._libc = ctypes.CDLL(None, use_errno=True)
            self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if self._fd < 0 or not self._add(""):
                raise OSError(ctypes.get_errno(), "inotify")
            self._add_existing()
        except (OSError, AttributeError):
            self.close()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="lesson6-watcher")
        if self.available:
            self._thread.start()

    @property
    def available(self) -> bool:
        return self._fd >= 0

    def _add(self, rel: str) -> bool:
        """Watch folder ``rel`` (never through a link: ``IN_DONT_FOLLOW``), within the limits."""
        if rel and (len(self._folders) >= MAX_FOLDERS or rel.count("/") >= MAX_DEPTH):
            return False
        mask = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_ONLYDIR | IN_DONT_FOLLOW
        wd = self._libc.inotify_add_watch(self._fd, bytes(self.directory / rel), mask)
        if wd >= 0:
            self._folders[wd] = rel
        return wd >= 0

    def _add_existing(self) -> None:
        """Folders made by earlier workers (the state folder outlives them), links never followed."""
        for root, dirs, _ in os.walk(self.directory, followlinks=False):
            if len(self._folders) > MAX_FOLDERS:  # the walk stops where the watches do
                return
            base = os.path.relpath(root, self.directory)
            for d in sorted(dirs):
                self._add(d if base == "." else f"{base}/{d}")

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
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            folder = self._folders.get(wd)
            if folder is None or not name:
                continue
            text = name.decode(errors="replace")
            rel = f"{folder}/{text}" if folder else text
            if mask & IN_ISDIR:  # a new folder: its files are checkpoints too (one per save, DCP)
                if mask & (IN_CREATE | IN_MOVED_TO) and self._add(rel) and fire:
                    self._scan(rel, renamed=bool(mask & IN_MOVED_TO))
                continue
            self.events.append((mask, rel))
            if not (fire and self.armed and self.fired is None):
                continue
            if mask & IN_MODIFY:
                size = size_under(self.directory, rel)
                if size is None:  # an atomic save renamed before the watcher looked (load)
                    self._gone = rel
                elif size >= self.min_bytes:
                    self._fire(rel)
            elif mask & IN_MOVED_TO and self._gone is not None:
                if (size_under(self.directory, rel) or 0) >= self.min_bytes:
                    self._fire(self._gone)  # `tear` plants the torn temporary file it was

    def _scan(self, rel: str, renamed: bool) -> None:
        """Files written into a new folder before its watch existed (a loaded machine): judged now.
        A folder renamed into place holds a finished save: the kill lands, nothing is torn."""
        if not (self.armed and self.fired is None):
            return
        try:
            fd, last = _parent_fd(self.directory, f"{rel}/x")
        except OSError:
            return
        try:
            names = sorted(e.name for e in os.scandir(fd) if e.is_file(follow_symlinks=False))
        except OSError:
            names = []
        finally:
            os.close(fd)
        for n in names[:MAX_FOLDERS]:
            if (size_under(self.directory, f"{rel}/{n}") or 0) >= self.min_bytes:
                if renamed:
                    self.finished.add(f"{rel}/{n}")
                self._fire(f"{rel}/{n}")
                return

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
    The file being written is cut to half of what it held (a prefix, as a kill earlier in the write
    leaves it; no archive of the learner's is parsed here); one found whole in a folder renamed into
    place is left whole. Every file operation goes through :func:`open_under` (``O_NOFOLLOW`` at
    each folder, regular files only; ``O_EXCL`` to create): a link or a FIFO is left alone."""
    name = watcher.fired
    if name is None:
        return ""
    if name in getattr(watcher, "finished", ()):
        return f"the save had finished (its folder renamed into place) before the kill landed: {name} left whole"
    try:
        fh = os.fdopen(open_under(directory, name, os.O_RDWR), "r+b")
    except FileNotFoundError:
        fh = None
    except OSError:
        return f"the kill interrupted a write to {name} (not a regular file: left alone)"
    if fh is not None:
        with fh:  # any prefix of what was written is what a kill earlier in the write leaves
            size = os.fstat(fh.fileno()).st_size
            os.ftruncate(fh.fileno(), size // 2)
        return f"{name} was written up to {size:,} bytes when the kill landed; the grader cut it to {size // 2:,} bytes, as a kill mid-write leaves it"
    final = watcher.renamed_to()
    if not final:
        return f"the kill interrupted a write to {name}"
    try:  # renamed already: plant the torn temporary file
        with os.fdopen(open_under(directory, final), "rb") as src:
            data = src.read()
        fd = open_under(directory, name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
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
