"""The last good rule files and inventory file of one server, kept where its workers find them.

A worker that starts (a replacement after a crash, an out-of-memory kill, a timeout, a
reload) reads the rule directory and the inventory file again. When those have been
broken on disk since the server started, the running workers rightly keep what they
loaded; a new worker must do the same instead of failing to boot, which stops gunicorn's
master and with it the whole server. So whoever loads a good set copies the bytes it
loaded here, and a worker that finds the files on disk broken starts from this copy.

The directory is private to one server (``serve`` makes it next to the metrics files and
removes it at exit). A rule snapshot is a directory swapped in by renaming a symlink, so a
reader never sees half of one; each writer removes only the snapshots it replaced itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

FileBytes = Sequence[tuple[str, bytes]]
_RULES = "rules"
_INVENTORY = "inventory"


class LastGood:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory)
        self._written: list[Path] = []
        self._count = 0

    def save_rules(self, files: FileBytes) -> None:
        """Keep ``files`` (name and bytes of each rule file) as the last good rule set."""
        self._count += 1
        staging = self.path / f"..rules-{os.getpid()}-{self._count}"
        staging.mkdir(parents=True, mode=0o700)
        for name, data in files:
            (staging / name).write_bytes(data)
        link = self.path / f"..link-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        link.symlink_to(staging.name)
        link.replace(self.path / _RULES)
        for old in self._written:
            shutil.rmtree(old, ignore_errors=True)
        self._written = [staging]

    def rules(self) -> Path | None:
        """The directory of the last good rule set, if one was kept."""
        target = self.path / _RULES
        return target.resolve() if target.is_dir() else None

    def save_inventory(self, data: bytes) -> None:
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging = self.path / f"..inventory-{os.getpid()}"
        staging.write_bytes(data)
        staging.replace(self.path / _INVENTORY)

    def inventory(self) -> Path | None:
        """The file of the last good inventory, if one was kept."""
        target = self.path / _INVENTORY
        return target if target.is_file() else None
