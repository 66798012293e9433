"""Atomic file replacement: the one way arenad rewrites a file in place.

``write_atomic`` and ``atomic_file`` write a temporary file beside the target (``.NAME.tmp`` in
the same directory, so the rename never crosses a file system), fsync it, ``os.replace`` it over
the target and fsync the directory, so a crash leaves either the old file or the new one, never
half of one, and the rename itself survives a power cut. When the write fails (a full disk, say)
the temporary is removed, so it does not hold the space the next attempt needs, and the old file
stays as it was.

``sync=False`` skips both fsyncs: the replacement is still atomic against a crash of the process
(``kill -9``), not against one of the machine. The UDP replay windows use it for their frequent
saves, where an fsync per second would stall the event loop for little gain.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO


def fsync_dir(path: Path) -> None:
    """fsync a directory, so the names created, renamed or removed in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temporary_for(path: Path) -> Path:
    """Where ``atomic_file`` writes before the rename: ``.NAME.tmp`` beside ``path``."""
    return path.with_name(f".{path.name}.tmp")


@contextmanager
def atomic_file(path: Path, *, sync: bool = True) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` when the ``with`` block ends without an exception.

    On an exception (in the block, or in the write, fsync or rename) the temporary is removed and
    ``path`` is left untouched. A failure of the directory fsync is raised after the rename.
    """
    tmp = temporary_for(path)
    try:
        with tmp.open("wb") as f:
            yield f
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_dir(path.parent)


@contextmanager
def atomic_text_file(path: Path, *, sync: bool = True, encoding: str = "utf-8") -> Iterator[TextIO]:
    """``atomic_file`` for text: what is written is encoded with ``encoding``."""
    with atomic_file(path, sync=sync) as raw:
        text = io.TextIOWrapper(raw, encoding=encoding)
        try:
            yield text
        finally:
            text.detach()  # flushes; the binary file stays open for the fsync and the rename


def write_atomic(path: Path, *chunks: bytes, sync: bool = True) -> None:
    """Replace ``path`` with ``chunks`` (written in order) as ``atomic_file`` does."""
    with atomic_file(path, sync=sync) as f:
        for chunk in chunks:
            f.write(chunk)
