"""A disk of its own to fail on purpose: a tmpfs mounted at a folder, remounted read-only and back,
or filled to the last byte and freed. Real faults of a real file system, as an operator meets
them (the kernel answers EROFS and ENOSPC); mounting needs root, and a machine that refuses it
says so in one line (MountRefused) for the caller to skip.

Used by tests/reference/test_disk_faults.py and the fault suite's disk rows (lab/faults.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path


class MountRefused(RuntimeError):
    """mount -t tmpfs is not allowed here (not root, or in a container without the capability)."""


class Tmpfs:
    def __init__(self, where: str | Path, size: str = "8m"):
        self.where = Path(where)
        self.where.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(self.where)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise MountRefused(f"mount -t tmpfs at {self.where} refused ({r.stderr.strip() or r.returncode}): "
                               "a disk fault needs root")
        self.mounted = True

    def _remount(self, option: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{option}", str(self.where)], check=True, capture_output=True)

    def read_only(self) -> None:
        self._remount("ro")

    def writable(self) -> None:
        self._remount("rw")

    def fill(self) -> Path:
        """Fill the disk to its last byte (dd stops at ENOSPC); the filler, to remove to free it."""
        filler = self.where / ".filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        return filler

    def unmount(self) -> None:
        """Lazily (-l): a file a thread still holds open does not keep the mount."""
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.where)], capture_output=True)
            self.mounted = False

    def __enter__(self) -> "Tmpfs":
        return self

    def __exit__(self, *exc) -> None:
        self.unmount()
