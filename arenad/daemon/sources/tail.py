"""Log-file follower with ``tail -F`` semantics, feeding a game-server log through a feed parser.

* It may start before the file exists, and follows the *name*: when the file is rotated (the
  name now points at another inode) it finishes the old file, then reads the new one from its
  start; when the file is truncated in place it starts again at offset 0.
* Partial lines are buffered until their newline arrives (a rotated file's unterminated last
  line is taken as complete: its writer has moved on).
* Every batch it hands the engine carries the follower's position after it (inode, offset and
  the parser's state). The engine records the position of the last *journaled* batch and the
  checkpoint stores it, so a restart resumes exactly there: nothing is skipped. Lines between
  that checkpoint and the crash are read again, and their kills, which carry stable ids from the
  parser, are refused as ``duplicate_id`` instead of being rated twice.
* It waits on the bounded engine queue, so a busy engine pauses the reading (nothing is lost:
  the file keeps the data).
* Chat lines (``ChatLine``) go to the ``chat`` sink, never to the engine queue (they are not
  journaled). Only chat read after the follower first reached the end of the file is handed
  over: a backlog (a restart resuming at its checkpoint, ``from_start``) holds chat that was
  said minutes or days ago, and answering it now would answer nobody.
* A feed's clock corrections (``ClockNote``: a map re-anchored so time stays monotonic, a game
  clock running faster than the wall clock) are counted in ``status.clock`` and logged.

Polling (every ``poll`` seconds at end of file) rather than inotify: it needs no dependency,
works on every filesystem, and costs one ``stat`` per poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from arenad.core.events import KillEvent, PlacementEvent, Reject
from arenad.daemon.config_sources import TailSpec
from arenad.daemon.types import Batch, ControlRequest
from arenad.feeds import Alias, ChatLine, ClockNote, FeedParser, NonKill

log = structlog.get_logger("arenad.tail")

CHUNK = 256 * 1024
#: Lines parsed between two yields to the event loop.
LINES_PER_SLICE = 200


@dataclass(slots=True)
class TailStatus:
    lines: int = 0
    rotations: int = 0
    truncations: int = 0
    nonkills: Counter[str] = field(default_factory=Counter)
    #: ClockNote kinds seen (reanchored, fast_clock) and the seconds maps were moved in all.
    clock: Counter[str] = field(default_factory=Counter)
    moved_seconds: float = 0.0
    #: Chat lines handed to the sink, and those held back as backlog.
    chat: int = 0
    stale_chat: int = 0


class LogFollower:
    """Follows one file; ``run`` until ``stop`` is set."""

    def __init__(
        self,
        spec: TailSpec,
        parser: FeedParser,
        queue: asyncio.Queue[Batch],
        position: Mapping[str, Any] | None = None,
        *,
        poll: float = 0.2,
        chat: Callable[[ChatLine], None] | None = None,
    ) -> None:
        self.spec = spec
        self.parser = parser
        self.queue = queue
        self.poll = poll
        self.chat = chat
        self._caught_up = False  # reached the end of the file once: what follows is live
        self._chat_failed = False
        self.status = TailStatus()
        self._saved = dict(position) if position else None
        if self._saved and self._saved.get("parser") is not None:
            parser.restore(self._saved["parser"])

    async def run(self, stop: asyncio.Event) -> None:
        path = Path(self.spec.path)
        handle: Any = None
        ident: tuple[int, int] | None = None
        offset = 0
        buf = b""
        first_open = True
        try:
            while not stop.is_set():
                if handle is None:
                    try:
                        handle = path.open("rb")
                    except FileNotFoundError:
                        first_open = False  # a file that appears later is read from its start
                        await _wait(stop, self.poll)
                        continue
                    opened = os.fstat(handle.fileno())
                    ident = (opened.st_dev, opened.st_ino)
                    offset, buf = self._start_offset(ident, opened.st_size, first_open), b""
                    handle.seek(offset)
                    first_open = False
                    log.info("tail_opened", path=str(path), offset=offset)
                data = handle.read(CHUNK)
                if data:
                    buf += data
                    cut = buf.rfind(b"\n")
                    if cut >= 0:
                        lines, buf = buf[:cut].split(b"\n"), buf[cut + 1 :]
                        offset += cut + 1
                        await self._emit(lines, ident, offset)
                    continue
                # At the end of the file: rotated, truncated, or just nothing new yet?
                self._caught_up = True
                st: os.stat_result | None
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    st = None
                now_ident = (st.st_dev, st.st_ino) if st is not None else None
                if now_ident != ident:
                    # Rotated (the name points at a new file) or removed: the old file is done.
                    if buf:  # its last, unterminated line is complete now: the writer moved on
                        offset += len(buf)
                        await self._emit([buf], ident, offset)
                        buf = b""
                    handle.close()
                    handle = None
                    self._saved = None  # whatever appears under the name is read from its start
                    if now_ident is not None:
                        self.status.rotations += 1
                        log.info("tail_rotated", path=str(path))
                        continue
                elif st is not None and st.st_size < offset:
                    self.status.truncations += 1
                    log.info("tail_truncated", path=str(path), size=st.st_size, offset=offset)
                    handle.seek(0)
                    offset, buf = 0, b""
                    continue
                await _wait(stop, self.poll)
        finally:
            if handle is not None:
                handle.close()

    def _start_offset(self, ident: tuple[int, int], size: int, first_open: bool) -> int:
        saved = self._saved
        if (
            saved is not None
            and (saved.get("dev"), saved.get("inode")) == ident
            and saved.get("offset", 0) <= size
        ):
            return int(saved["offset"])  # the same file as at the checkpoint: resume there
        if saved is not None:
            return 0  # rotated while arenad was down: the new file from its start
        if first_open and not self.spec.from_start:
            return size  # first run ever: like tail -F, only what is written from now on
        return 0

    async def _emit(self, lines: list[bytes], ident: tuple[int, int] | None, end_offset: int) -> None:
        items: list[KillEvent | PlacementEvent | Reject] = []
        parser = self.parser
        nonkills = self.status.nonkills
        now = time.time()
        # An alias (a name seen with a guid, issue 17) is journaled as a merge between the events
        # before and after it: the events before it go in a batch of their own, without a
        # position (a crash before the rest is journaled re-reads these lines; their ids repeat).
        alias: ControlRequest | None = None
        for k, raw in enumerate(lines, start=1):
            line = raw[:-1] if raw.endswith(b"\r") else raw  # CRLF logs from Windows servers
            for item in parser.feed(line, now):
                if isinstance(item, (KillEvent, PlacementEvent, Reject)):
                    items.append(item)
                elif isinstance(item, NonKill):
                    nonkills[item.kind] += 1
                elif isinstance(item, Alias):
                    if items or alias is not None:
                        before = Batch(
                            source=self.spec.key, items=items, server=self.spec.server, control=alias
                        )
                        await self.queue.put(before)
                    items = []
                    reason = f"seen with a guid in {self.spec.key}"
                    alias = ControlRequest(
                        "merge", {"player": item.player, "into": item.into, "reason": reason}, item.t
                    )
                elif isinstance(item, ChatLine):
                    self._chat(item)
                elif isinstance(item, ClockNote):
                    self._clock_note(item)
            if k % LINES_PER_SLICE == 0:
                await asyncio.sleep(0)
        self.status.lines += len(lines)
        dev, inode = ident if ident is not None else (0, 0)
        position = {"dev": dev, "inode": inode, "offset": end_offset, "parser": parser.state()}
        await self.queue.put(
            Batch(
                source=self.spec.key,
                items=items,
                server=self.spec.server,
                position=(self.spec.key, position),
                control=alias,
            )
        )

    def _chat(self, line: ChatLine) -> None:
        if self.chat is None:
            return
        if not self._caught_up:
            self.status.stale_chat += 1
            return
        self.status.chat += 1
        try:
            self.chat(line)
        except Exception:  # the sink's bug must not stop the reading of kills
            if not self._chat_failed:  # once: a line that trips it would trip it every time
                self._chat_failed = True
                log.exception("chat_sink_failed", path=self.spec.path)

    def _clock_note(self, note: ClockNote) -> None:
        status = self.status
        status.clock[note.kind] += 1
        if note.kind == "reanchored":
            status.moved_seconds += note.moved
            # Once per map change at most: a log's clock, not a per-event message.
            log.warning(
                "tail_clock_reanchored",
                path=self.spec.path,
                moved_seconds=round(note.moved, 3),
                reanchored=status.clock["reanchored"],
                moved_seconds_total=round(status.moved_seconds, 3),
                hint=note.hint or None,
            )
        else:
            log.warning("tail_clock_fast", path=self.spec.path, ratio=round(note.ratio, 2), hint=note.hint)


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
