"""structlog set-up, and rate-limited warnings for rejected events.

Logs go to stderr: as JSON lines under systemd (journald keeps one record per line and the
fields stay machine-readable) or whenever stderr is not a terminal, as coloured key=value lines
on a terminal. Nothing is logged per event at info level (STYLE.md §10); rejects are counted
by the metrics and surface here only as one ``event_rejected`` warning per reason per interval.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

import structlog

FORMATS = ("auto", "json", "console")
LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


def json_wanted(fmt: str, stream: TextIO | None, environ: Mapping[str, str]) -> bool:
    """Whether ``fmt`` means JSON for this stream and environment (``"auto"`` decides here)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: must be one of {', '.join(FORMATS)}")
    if fmt != "auto":
        return fmt == "json"
    # systemd sets JOURNAL_STREAM when stderr is the journal and INVOCATION_ID for every unit run.
    if environ.get("JOURNAL_STREAM") or environ.get("INVOCATION_ID"):
        return True
    return stream is None or not stream.isatty()


def _stderr_logger(*_args: Any) -> structlog.PrintLogger:
    # Resolved at each call rather than at configure time, so a replaced sys.stderr (pytest's
    # capture, a daemon redirect) is honoured instead of writing to a stale or closed file.
    return structlog.PrintLogger(sys.stderr)


def configure_logging(fmt: str = "auto", level: str = "info") -> None:
    """Configure structlog for the whole process: renderer by ``fmt``, minimum ``level``."""
    min_level = LEVELS.get(level.lower()) if isinstance(level, str) else None
    if min_level is None:
        raise ValueError(f"log level {level!r}: must be one of {', '.join(LEVELS)}")
    as_json = json_wanted(fmt, sys.stderr, os.environ)
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: list[structlog.typing.Processor]
    if as_json:
        renderer = [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
    structlog.configure(
        processors=[*shared, *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(min_level),
        logger_factory=_stderr_logger,
        # Not cached: nothing logs per event, and an uncached proxy follows a later configure()
        # (tests, `arenad run` after a config check) instead of keeping the first one forever.
        cache_logger_on_first_use=False,
    )


def configure_level(level: str) -> None:
    """Change the minimum level of a configured structlog (the admin ``reload``)."""
    min_level = LEVELS.get(level.lower())
    if min_level is None:
        raise ValueError(f"log level {level!r}: must be one of {', '.join(LEVELS)}")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(min_level))


class WarningLogger(Protocol):
    """The part of a structlog logger that ``RejectWarnings`` uses."""

    def warning(self, event: str, **kw: Any) -> Any: ...


@dataclass(slots=True)
class _ReasonState:
    last_warned: float
    suppressed: int = 0


class RejectWarnings:
    """At most one ``event_rejected`` warning per reason per ``interval`` seconds.

    Each warning carries the reason, source and detail of the reject that triggered it, and
    ``suppressed``: how many rejects of that reason were not logged since the previous warning.
    Exact totals are in ``arenad_events_rejected_total``; this only points a human at an example.
    """

    def __init__(
        self,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        logger: WarningLogger | None = None,
    ) -> None:
        if not interval >= 0:
            raise ValueError(f"interval {interval!r}: must be a number of seconds >= 0")
        self._interval = interval
        self._clock = clock
        self._log: WarningLogger = structlog.get_logger("arenad.rejects") if logger is None else logger
        self._reasons: dict[str, _ReasonState] = {}  # a handful of reject reasons: bounded

    @property
    def interval(self) -> float:
        return self._interval

    @interval.setter
    def interval(self, value: float) -> None:
        self._interval = value

    def reject(self, reason: str, source: str, detail: str) -> None:
        """Note one reject; log it if its reason has not been warned about within the interval."""
        now = self._clock()
        state = self._reasons.get(reason)
        if state is not None and now - state.last_warned < self._interval:
            state.suppressed += 1
            return
        suppressed = 0 if state is None else state.suppressed
        self._reasons[reason] = _ReasonState(last_warned=now)
        self._log.warning(
            "event_rejected", reason=reason, source=source, detail=detail, suppressed=suppressed
        )
