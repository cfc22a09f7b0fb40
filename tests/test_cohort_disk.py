"""Disk per learner: a home (and the exchange) on an ext4 image of its own, loop-mounted.

Before: homes, the exchange and the gradebook shared the host's one file system without quotas, so
a learner's write in their home could fill the disk the course runs on. Here two stand-in accounts
get small images: A writes until its home is full, which A's write alone meets (ENOSPC) while the
image's share of the host's disk stays what it was when made, and B, beside it, still writes.
The browser smoke test (test_cohort.py) checks the same on a real hub's homes.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from grader.frontends import cohort_disk

A, B = "nobody", "daemon"  # any two accounts that are not root
pytestmark = pytest.mark.skipif(
    cohort_disk.missing() is not None, reason=f"no loop mounts here: {cohort_disk.missing()}"
)


def _fill(user: str, path: Path, mb: int) -> tuple[str, int]:
    """As ``user``, write ``mb`` MiB to ``path`` with dd; returns dd's complaint (or "") and the
    bytes that landed."""
    done = _as(user, "dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mb}", "conv=fsync")
    complaint = "No space left on device" if "No space left" in done.stderr else ""
    return complaint, path.stat().st_size


def _as(user: str, *cmd: str) -> subprocess.CompletedProcess:
    pw = pwd.getpwnam(user)

    def drop() -> None:
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    return subprocess.run(cmd, preexec_fn=drop, capture_output=True, text=True, cwd="/")


@pytest.fixture
def base():
    """A folder the stand-in accounts can reach (pytest's own is root's 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="effkit-disk-test-", dir="/srv"))
    folder.chmod(0o755)
    yield folder
    cohort_disk.release_under([folder])
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def homes(base):
    made = {}
    for user in (A, B):
        pw = pwd.getpwnam(user)
        home = base / "home" / user
        home.mkdir(parents=True)
        (home / ".bashrc").write_text("# the skeleton useradd copied\n")
        made[user] = (home, base / "disks" / f"{user}.ext4", pw)
    yield made


def _allocated(image: Path) -> int:
    return image.stat().st_blocks * 512


def test_a_full_home_stops_its_owner_alone_and_takes_no_more_of_the_host(homes):
    for home, image, pw in homes.values():
        said = cohort_disk.bound(home, image, 16, pw.pw_uid, pw.pw_gid, 0o700)
        assert said == "made (16 MiB)", said
        assert os.path.ismount(home) and home.stat().st_uid == pw.pw_uid
        assert oct(home.stat().st_mode & 0o777) == "0o700"
        assert sorted(p.name for p in home.iterdir()) == [".bashrc"]  # skeleton kept, no lost+found
    (a_home, a_image, _), (b_home, _, _) = homes[A], homes[B]
    before = _allocated(a_image)
    assert before >= 16 << 20  # allocated in full when made, not as it fills
    end, written = _fill(A, a_home / "fill", 256)
    assert end == "No space left on device", end
    assert 8 << 20 <= written < 16 << 20, written  # most of the image, never more
    assert _allocated(a_image) == before  # the host's disk gave nothing more to A
    assert _fill(B, b_home / "f", 2) == ("", 2 << 20)  # B, beside a full A, still writes
    # root (the hub copying the leaderboard in) meets the same end: no blocks reserved for it
    with pytest.raises(OSError) as err:
        (a_home / "root-writes").write_bytes(b"y" * (4 << 20))
    assert err.value.errno == 28


def test_a_restart_finds_the_home_as_it_was_and_a_deployments_volume_is_left_alone(homes, base):
    home, image, pw = homes[A]
    cohort_disk.bound(home, image, 16, pw.pw_uid, pw.pw_gid, 0o700)
    (home / "work.ipynb").write_text("{}")
    assert cohort_disk.bound(home, image, 16, pw.pw_uid, pw.pw_gid, 0o700) == "mounted already"
    assert cohort_disk.release(home, image) and not os.path.ismount(home)
    assert not (home / "work.ipynb").exists()  # the work is in the image, not on the host's disk
    assert cohort_disk.bound(home, image, 16, pw.pw_uid, pw.pw_gid, 0o700) == "mounted"
    assert (home / "work.ipynb").read_text() == "{}"
    # a folder that is already a file system of its own (a deployment's volume) is not ours
    other, _, pw_b = homes[B]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(other)], check=True)
    try:
        said = cohort_disk.bound(other, base / "disks" / "b2.ext4", 16, pw_b.pw_uid, 0, 0o700)
        assert said.startswith("left alone"), said
        assert not cohort_disk.release(other, base / "disks" / "b2.ext4")
    finally:
        subprocess.run(["umount", str(other)], check=True)


def test_removing_the_accounts_drops_the_homes_images_and_keeps_the_exchanges(
    tmp_path, monkeypatch
):
    homes = {u: tmp_path / "home" / u for u in (A, B)}
    real = pwd.getpwnam
    monkeypatch.setattr(
        cohort_disk.pwd,
        "getpwnam",
        lambda n: pwd.struct_passwd((*real(n)[:5], str(homes[n]), real(n)[6])),
    )
    exchange = tmp_path / "srv" / "exchange"
    try:
        placed = cohort_disk.bound_cohort([A, B], exchange, tmp_path / "disks", 16, 16)
        assert set(placed) == {str(homes[A]), str(homes[B]), str(exchange)}
        assert all(os.path.ismount(f) for f in placed)
        assert oct(exchange.stat().st_mode & 0o7777) == "0o1777"  # nbgrader's exchange mode
        (exchange / "kept").write_text("a submission")
        released = cohort_disk.release_cohort(placed, drop_homes=True)
        assert sorted(released) == sorted(placed)
        assert not any(os.path.ismount(f) for f in placed)
        assert sorted(p.name for p in (tmp_path / "disks").iterdir()) == ["exchange.ext4"]
        assert cohort_disk.bound(exchange, tmp_path / "disks" / "exchange.ext4", 16, 0, 0, 0o1777)
        assert (exchange / "kept").read_text() == "a submission"
    finally:
        cohort_disk.release_under([tmp_path])


def test_a_home_fuller_than_its_image_is_refused_and_leaves_nothing_half_made(homes, base):
    """A home holding more than the image would take: up stops with the reason, and neither a
    half-filled image (which the next up would mount over the home, hiding the rest) nor a mount
    is left; the home keeps every file."""
    home, image, pw = homes[A]
    (home / "big").write_bytes(b"x" * (20 << 20))
    with pytest.raises(cohort_disk.DiskError, match="more than its 16 MiB image"):
        cohort_disk.bound(home, image, 16, pw.pw_uid, pw.pw_gid, 0o700)
    assert not os.path.ismount(home) and not image.exists()
    assert not list(image.parent.glob("*.part"))
    assert sorted(p.name for p in home.iterdir()) == [".bashrc", "big"]
    # a link where the home should be is never mounted over (root would follow it)
    link = base / "home" / "link"
    link.symlink_to(base / "elsewhere")
    with pytest.raises(cohort_disk.DiskError, match="symbolic link"):
        cohort_disk.bound(link, base / "disks" / "link.ext4", 16, pw.pw_uid, pw.pw_gid, 0o700)
    assert not (base / "elsewhere").exists()


def test_the_originals_leave_the_folder_once_they_are_in_the_image(homes):
    """What a folder held before its first mount moves into the image: nothing stays hidden under
    the mount, owned by a uid that useradd may give the next account."""
    home, image, pw = homes[B]
    os.chown(home / ".bashrc", pw.pw_uid, pw.pw_gid)
    cohort_disk.bound(home, image, 16, pw.pw_uid, pw.pw_gid, 0o700)
    assert (home / ".bashrc").read_text().startswith("# the skeleton")
    assert cohort_disk.release(home, image)
    assert list(home.iterdir()) == []
