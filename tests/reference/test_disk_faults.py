"""A replica's disk fails for a while (read-only, then full) and comes back: its failing steps are
postponed and tried again until they succeed, as ClickHouse's queue retries a failing fetch, so
replication completes by itself with no row lost or duplicated (checkers/oracle.py), and no
temporary file is left behind (issue 38). Before, a (replica, kind) whose step raised 20 times was
never tried again, and the acknowledged rows of a 10-second fault stayed on one owner of two.

The disk is real: a tmpfs mounted at the replica's data folder, remounted read-only and filled
with a file; mounting needs root (the tests skip, saying so, where it is not allowed).
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from checkers.oracle import violations
from protocol.keeper import MemoryEnsemble
from reference.cluster import DISK_POSTPONE_CAP, MAX_STEP_ERRORS, Cluster
from reference.workload import WORKLOAD, blocks

RF = WORKLOAD.replication_factor


class Disk:
    """A tmpfs of its own at `where`, to fail on purpose."""

    def __init__(self, where: Path, size: str = "4m"):
        self.where = where
        where.mkdir(parents=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"a disk fault needs a tmpfs of its own and mount refused it ({r.stderr.strip()}): "
                        "run as root")

    def _mount(self, *options: str) -> None:
        subprocess.run(["mount", "-o", ",".join(("remount", *options)), str(self.where)], check=True)

    def read_only(self) -> None:
        self._mount("ro")

    def writable(self) -> None:
        self._mount("rw")

    def fill(self) -> Path:
        """Fill the disk to the last byte; the filler's path (remove it to free the disk)."""
        filler = self.where / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        return filler

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.where)], capture_output=True)


@pytest.fixture
def disk(tmp_path):
    d = Disk(tmp_path / "data" / "r2")
    yield d
    d.unmount()


def faulty_run(tmp_path, disk: Disk, fault) -> Cluster:
    """Blocks replicated to all, then more blocks with r2's disk failed by `fault` while every
    replica goes on stepping (r2's execute attempted 40 times a MAX_STEP_ERRORS), then the disk
    back; returns the settled cluster."""
    c = Cluster(MemoryEnsemble().connect, tmp_path / "data", replicas=("r1", "r2", "r3"), seed=3)
    stream = blocks(random.Random(3), 24, 5, months=2)
    for block_id, rows in (next(stream) for _ in range(8)):
        c.insert(rows, block_id)
    c.settle()
    undo = fault()
    for block_id, rows in stream:
        c.insert(rows, block_id, at="r1")
    r2 = c.replicas["r2"]
    for _ in range(40 * MAX_STEP_ERRORS):
        for r in c.replicas.values():
            for kind in ("pull", "execute"):
                c._try(kind, r)
    assert any(kind == "execute" for _, r, kind, _ in c.disk_faults if r == "r2"), "the fault hit no fetch"
    failed = sum(1 for _, r, kind, _ in c.disk_faults if (r, kind) == ("r2", "execute"))
    assert failed > MAX_STEP_ERRORS   # tried again past the old give-up point ...
    assert failed < 40 * MAX_STEP_ERRORS / (DISK_POSTPONE_CAP / 2)   # ... but postponed, not hammered
    assert not c.history.tables["errors"], c.history.tables["errors"]   # the disk's fault, not a bug
    undo()
    c.settle()
    assert not c.disk_failures and r2.queue() == [], "r2 did not catch up once its disk was back"
    return c


def judged(c: Cluster) -> None:
    c.query()
    c.snapshot()
    assert violations(c.history, RF) == []
    acked = [x for x in c.history.tables["inserts"] if x["status"] == "ok"]
    assert len(acked) >= 100


def no_temporary_files(folder: Path) -> None:
    assert sorted(p.name for p in folder.glob(".tmp_*")) == []


def test_replication_resumes_after_a_read_only_disk(tmp_path, disk):
    def fault():
        disk.read_only()
        return disk.writable
    c = faulty_run(tmp_path, disk, fault)
    assert any("Read-only file system" in e for *_, e in c.disk_faults)
    judged(c)
    no_temporary_files(disk.where)


def test_replication_resumes_after_a_full_disk_and_leaves_no_temporary_file(tmp_path, disk):
    def fault():
        filler = disk.fill()
        return filler.unlink
    c = faulty_run(tmp_path, disk, fault)
    assert any("No space left on device" in e for *_, e in c.disk_faults)
    judged(c)
    no_temporary_files(disk.where)


def test_a_temporary_file_a_killed_write_left_is_removed_at_start(tmp_path):
    from protocol.parts import PartStore
    folder = tmp_path / "r1"
    folder.mkdir()
    (folder / ".tmp_202401-3_1_1_0").write_text('{"name": "202401-3_1_1_0", "rows": [')   # cut off mid-write
    store = PartStore(folder)
    assert store.names() == [] and not list(folder.glob(".tmp_*"))
