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

import json
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


def _bytes_in(folder: Path) -> int:
    done = subprocess.run(["du", "-sb", "--", str(folder)], capture_output=True, text=True)
    return int(done.stdout.split()[0]) if done.returncode == 0 and done.stdout else 0


def _make(image: Path, folder: Path, size_mb: int) -> None:
    """The image, formatted and holding the folder's current files, put in place only once whole
    (a failure leaves no half-made image for the next ``up`` to mount); the originals then leave
    the folder, so none stays hidden under the mount owned by a uid ``useradd`` may reuse."""
    used = _bytes_in(folder)
    if used > (size_mb << 20) * 0.9:  # ext4's own metadata takes a few percent
        raise DiskError(
            f"{folder} holds {used >> 20} MiB, more than its {size_mb} MiB image would take: "
            "raise the size (--home-gb, --exchange-gb)"
        )
    image.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = image.with_name(image.name + ".part")
    part.unlink(missing_ok=True)
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # allocated now, not as it fills: the host's disk is never promised twice
            os.posix_fallocate(fd, 0, size_mb << 20)
        except OSError as err:
            raise DiskError(f"{size_mb} MiB for {folder}: {err.strerror}") from None
        finally:
            os.close(fd)
        # -m 0: no blocks reserved for root, so root-run writes (the hub's) meet the same end;
        # nodiscard: mkfs would otherwise punch the allocation back out of the image
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,nodiscard", str(part))
        with tempfile.TemporaryDirectory(dir=image.parent) as staging:
            _run("mount", "-o", "loop,nosuid,nodev", str(part), staging)
            try:
                # mkfs's, root's: a stray folder in the learner's file browser otherwise (and in the
                # way of a learner's own lost+found)
                (Path(staging) / "lost+found").rmdir()
                if any(folder.iterdir()):  # a home's skeleton, a first up's work, the exchange
                    _run("cp", "-a", f"{folder}/.", staging)
            finally:
                _run("umount", staging)
        os.replace(part, image)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def bound(folder: Path, image: Path, size_mb: int, uid: int, gid: int, mode: int) -> str:
    """Mount ``image`` on ``folder`` (made, and filled with the folder's current files, when it
    does not exist yet); the mounted root gets ``uid``, ``gid`` and ``mode``. Returns one phrase
    saying what happened; raises DiskError where it could not."""
    if folder.is_symlink():  # root would mount over, and chown, wherever it points
        raise DiskError(f"{folder} is a symbolic link: not mounted over")
    if os.path.ismount(folder):
        if _ours(folder, image):
            return "mounted already"
        return "left alone: already a file system of its own (a deployment's volume)"
    folder.mkdir(parents=True, exist_ok=True)
    made = not image.exists()
    if made:
        _make(image, folder, size_mb)
    _run("mount", "-o", "loop,nosuid,nodev", str(image), str(folder))
    os.chown(folder, uid, gid)
    folder.chmod(mode)
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
    listed = subprocess.run(
        ["findmnt", "-J", "-l", "-o", "TARGET,SOURCE"], capture_output=True, text=True
    ).stdout
    done = []
    for fs in json.loads(listed or '{"filesystems": []}')["filesystems"]:
        target, source = fs.get("target") or "", fs.get("source") or ""
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
    try:
        for name in accounts:
            pw = pwd.getpwnam(name)
            image = disks / f"{name}.ext4"
            said = bound(Path(pw.pw_dir), image, home_mb, pw.pw_uid, pw.pw_gid, 0o700)
            if "left alone" not in said:
                placed[pw.pw_dir] = str(image)
        image = disks / "exchange.ext4"
        if exchange_mb > 0 and "left alone" not in bound(
            exchange, image, exchange_mb, 0, 0, 0o1777
        ):
            placed[str(exchange)] = str(image)
    except DiskError:  # none of it: nothing mounted that no plan records
        release_cohort(placed, drop_homes=False)
        raise
    return placed


def drop_images(disks: Path, accounts: list[str]) -> None:
    """The home images of ``accounts`` (being removed): a later account by the same name starts empty."""
    for name in accounts:
        (disks / f"{name}.ext4").unlink(missing_ok=True)


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
