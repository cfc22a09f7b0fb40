"""Disk per learner without kernel quotas: each home, and the exchange, a fixed-size ext4 image.

Kernel quotas (ext4's ``quota`` feature, XFS ``prjquota``) are what a deployment should use, but a
course VM's kernel may lack them (this one: no CONFIG_QUOTA), and one file system then holds the
homes, the exchange and the gradebook: a learner's ``dd`` in their home would fill the course's
disk. Here each home is its own ext4 file system in an image allocated in full when made
(``posix_fallocate``), loop-mounted ``nosuid,nodev``: a full home answers ENOSPC to its owner
alone, and N learners can never take more of the host's disk than N images. The exchange gets one
image of its own: a learner can fill it (nbgrader's exchange is one shared folder) and so keep
others from submitting until the instructor clears it, but never the disk the gradebook is on.
Images live in root's ``course/hub/disks/`` and outlive ``cohort down``: ``up`` mounts them again.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

TOOLS = ("mkfs.ext4", "mount", "umount", "losetup")


class DiskError(RuntimeError):
    """A folder could not be bounded; the message says why."""


def missing() -> str | None:
    """Why folders cannot be bounded on this machine, or None when they can."""
    lacking = [t for t in TOOLS if shutil.which(t) is None]
    if lacking:
        return f"{', '.join(lacking)} not installed (Debian: e2fsprogs, mount)"
    if os.geteuid() != 0:
        return "loop mounts need root"
    if not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control; a container needs them passed in)"
    return None


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise DiskError(f"{' '.join(cmd[:2])}: {(done.stderr or done.stdout).strip()[-300:]}")


def _ours(folder: Path, image: Path) -> bool:
    """Whether ``folder`` is a mount of ``image`` through a loop device."""
    if not os.path.ismount(folder):
        return False
    source = subprocess.run(
        ["findmnt", "-n", "-o", "SOURCE", "--mountpoint", str(folder)],
        capture_output=True,
        text=True,
    ).stdout.split()
    loops = subprocess.run(
        ["losetup", "-n", "-O", "NAME", "-j", str(image)], capture_output=True, text=True
    ).stdout.split()
    return bool(source) and source[-1] in loops


def bound(folder: Path, image: Path, size_mb: int, uid: int, gid: int, mode: int) -> str:
    """Mount ``image`` on ``folder`` (made, and filled with the folder's current files, when it
    does not exist yet); the mounted root gets ``uid``, ``gid`` and ``mode``. Returns one phrase
    saying what happened; raises DiskError where it could not."""
    if os.path.ismount(folder):
        if _ours(folder, image):
            return "mounted already"
        return "left alone: already a file system of its own (a deployment's volume)"
    folder.mkdir(parents=True, exist_ok=True)
    made = not image.exists()
    if made:
        image.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # allocated now, not as it fills: the host's disk is never promised twice
            os.posix_fallocate(fd, 0, size_mb << 20)
        except OSError as err:
            image.unlink()
            raise DiskError(f"{size_mb} MiB for {folder}: {err.strerror}") from None
        finally:
            os.close(fd)
        # -m 0: no blocks reserved for root, so root-run writes (the hub's) meet the same end;
        # nodiscard: mkfs would otherwise punch the allocation back out of the image
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,nodiscard", str(image))
        if any(folder.iterdir()):  # what the folder held (a home's skeleton, a first up's work)
            with tempfile.TemporaryDirectory(dir=image.parent) as staging:
                _run("mount", "-o", "loop,nosuid,nodev", str(image), staging)
                try:
                    _run("cp", "-a", f"{folder}/.", staging)
                finally:
                    _run("umount", staging)
    _run("mount", "-o", "loop,nosuid,nodev", str(image), str(folder))
    os.chown(folder, uid, gid)
    folder.chmod(mode)
    lost = folder / "lost+found"
    if made and lost.is_dir() and not any(lost.iterdir()):
        lost.rmdir()  # mkfs's, root's: a stray folder in the learner's file browser otherwise
    return f"made ({size_mb} MiB)" if made else "mounted"


def release(folder: Path, image: Path) -> bool:
    """Unmount ``folder`` where ``image`` is mounted on it; True if it was."""
    if not _ours(folder, image):
        return False
    done = subprocess.run(["umount", str(folder)], capture_output=True)
    if done.returncode != 0:  # a process still in it: detach now, freed when it leaves
        _run("umount", "--lazy", str(folder))
    return True


def release_under(prefixes: list[Path]) -> list[str]:
    """Unmount every loop mount whose mount point lies under one of ``prefixes`` (a test's or a
    failed ``up``'s leftovers); returns them."""
    mounts = subprocess.run(
        ["findmnt", "-rn", "-o", "TARGET,SOURCE"], capture_output=True, text=True
    ).stdout
    done = []
    for line in mounts.splitlines():
        target, _, source = line.partition(" ")
        target = target.encode().decode("unicode_escape")  # findmnt -r escapes spaces as \x20
        if source.startswith("/dev/loop") and any(Path(target).is_relative_to(p) for p in prefixes):
            subprocess.run(["umount", "--lazy", target], capture_output=True)
            done.append(target)
    return done


def bound_cohort(
    accounts: list[str], exchange: Path, disks: Path, home_mb: int, exchange_mb: int
) -> dict[str, str]:
    """Each account's home, and the exchange, on an image of its own in ``disks``; returns
    folder -> image for what is mounted (``cohort down --remove-accounts`` releases them)."""
    placed = {}
    for name in accounts:
        pw = pwd.getpwnam(name)
        image = disks / f"{name}.ext4"
        if "left alone" not in bound(Path(pw.pw_dir), image, home_mb, pw.pw_uid, pw.pw_gid, 0o700):
            placed[pw.pw_dir] = str(image)
    image = disks / "exchange.ext4"
    if "left alone" not in bound(exchange, image, exchange_mb, 0, 0, 0o1777):
        placed[str(exchange)] = str(image)
    return placed


def release_cohort(placed: dict[str, str], drop_homes: bool) -> list[str]:
    """Unmount what :func:`bound_cohort` mounted; ``drop_homes`` also deletes the homes' images
    (their accounts are being removed), never the exchange's. Returns the folders released."""
    done = []
    for folder, image in placed.items():
        if release(Path(folder), Path(image)):
            done.append(folder)
        if drop_homes and Path(image).name != "exchange.ext4":
            Path(image).unlink(missing_ok=True)
    return done
