"""The state directory: its lock, and the stores every room of the daemon writes or reads.

::

    <state_dir>/lock                 flock: one arenad per directory
               journal-*.log         state.Journal (fsynced before anything is applied)
               checkpoint-*.ckpt     state.Checkpoints
               archive/              history.Archive (retired journal segments, compressed)
               snapshots/            history.Snapshots (checkpoints kept as history)
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

from arenad.daemon.history import Archive, Snapshots
from arenad.daemon.state import Checkpoints, Journal
from arenad.errors import ArenadError
from arenad.settings import Settings


class StateDir:
    """The journal, checkpoints, archive and snapshots of one state directory."""

    def __init__(self, settings: Settings) -> None:
        self.path = Path(settings.daemon.state_dir)
        self.journal = Journal(self.path)
        self.checkpoints = Checkpoints(self.path, keep=settings.daemon.checkpoints_kept)
        hist = settings.history
        self.archive: Archive | None = (
            Archive(self.path / "archive", hist.archive_file_bytes) if hist.archive else None
        )
        self.snapshots = Snapshots(self.path / "snapshots", hist.snapshots_kept)
        # Held while history files change (archiving, snapshot pruning) and while a recompute or
        # an exclusion scan reads them: a reader never sees a segment vanish under it.
        self.history_lock = asyncio.Lock()
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Take the directory's lock; refuses when another arenad holds it."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            raise ArenadError(f"state directory {self.path} is in use by another arenad") from e
        self._lock_fd = fd

    def close(self) -> None:
        """Close the journal and release the lock (the lock file stays)."""
        self.journal.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def archive_reader(self) -> Archive:
        """An Archive over the same files, for reading in a worker thread (under history_lock)."""
        a = Archive(self.path / "archive")
        if self.archive is not None:
            a.files = [dict(f) for f in self.archive.files]
        else:
            a.load()
        return a
