"""structlog configuration (JSON vs console, level filtering) and rate-limited reject warnings."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import structlog

from arenad.daemon.logs import RejectWarnings, configure_logging, json_wanted


class CapturingLogger:
    """Records ``warning`` calls the way RejectWarnings makes them."""

    def __init__(self) -> None:
        self.warnings: list[dict[str, Any]] = []

    def warning(self, event: str, **kw: Any) -> None:
        self.warnings.append({"event": event, **kw})


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def reset_structlog() -> Iterator[None]:
    # configure_logging() changes process-wide state; later tests expect structlog's defaults.
    yield
    structlog.reset_defaults()


class TestRejectWarnings:
    """At most one event_rejected warning per reason per interval, with a count of the rest."""

    def test_first_reject_of_a_reason_is_logged_at_once(self) -> None:
        log = CapturingLogger()
        RejectWarnings(10.0, FakeClock(), log).reject("malformed", "udp", "not msgpack")
        assert log.warnings == [
            {
                "event": "event_rejected",
                "reason": "malformed",
                "source": "udp",
                "detail": "not msgpack",
                "suppressed": 0,
            }
        ]

    def test_rejects_inside_the_interval_are_counted_not_logged(self) -> None:
        log, clock = CapturingLogger(), FakeClock()
        warnings = RejectWarnings(10.0, clock, log)
        warnings.reject("malformed", "udp", "first")
        for i in range(5):
            clock.now += 1.75  # binary fractions: the sums below are exact
            warnings.reject("malformed", "mqtt", f"quiet {i}")
        assert len(log.warnings) == 1
        clock.now += 1.25  # 10.0 s after the first warning: the interval is over
        warnings.reject("malformed", "mqtt", "next")
        assert log.warnings[1] == {
            "event": "event_rejected",
            "reason": "malformed",
            "source": "mqtt",
            "detail": "next",
            "suppressed": 5,
        }

    def test_suppressed_count_restarts_after_each_warning(self) -> None:
        log, clock = CapturingLogger(), FakeClock()
        warnings = RejectWarnings(10.0, clock, log)
        for _round in range(3):
            for _ in range(4):
                warnings.reject("self_kill", "udp", "a == a")
            clock.now += 10.0
        assert [w["suppressed"] for w in log.warnings] == [0, 3, 3]

    def test_each_reason_has_its_own_interval(self) -> None:
        log = CapturingLogger()
        warnings = RejectWarnings(10.0, FakeClock(), log)
        for reason in ("malformed", "bad_type", "malformed", "oversize", "bad_type"):
            warnings.reject(reason, "udp", "x")
        assert [w["reason"] for w in log.warnings] == ["malformed", "bad_type", "oversize"]

    def test_a_zero_interval_logs_every_reject(self) -> None:
        log = CapturingLogger()
        warnings = RejectWarnings(0.0, FakeClock(), log)
        for _ in range(3):
            warnings.reject("malformed", "udp", "x")
        assert [w["suppressed"] for w in log.warnings] == [0, 0, 0]

    @pytest.mark.parametrize("interval", [-1.0, float("nan")])
    def test_a_negative_or_nan_interval_is_refused(self, interval: float) -> None:
        with pytest.raises(ValueError, match="interval"):
            RejectWarnings(interval)

    def test_default_logger_is_structlog_at_warning_level(self) -> None:
        with structlog.testing.capture_logs() as logs:
            RejectWarnings(10.0, FakeClock()).reject("out_of_order", "file", "t went back 5 s")
        assert logs == [
            {
                "event": "event_rejected",
                "log_level": "warning",
                "reason": "out_of_order",
                "source": "file",
                "detail": "t went back 5 s",
                "suppressed": 0,
            }
        ]


def err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    captured = capsys.readouterr()
    assert captured.out == ""  # logs go to stderr only; stdout belongs to command output
    return captured.err.splitlines()


class TestConfigureLogging:
    """configure_logging renders JSON lines or console lines on stderr, filtered by level."""

    def test_json_lines_carry_timestamp_level_event_and_fields(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        configure_logging("json", "info")
        structlog.get_logger("test").info("checkpoint_written", players=12, path="/var/lib/arenad/cp")
        (line,) = err_lines(capsys)
        record = json.loads(line)
        assert record["event"] == "checkpoint_written"
        assert record["level"] == "info"
        assert record["players"] == 12
        assert datetime.fromisoformat(record["timestamp"]).utcoffset() is not None

    def test_level_filters_lower_levels(self, capsys: pytest.CaptureFixture[str]) -> None:
        configure_logging("json", "warning")
        log = structlog.get_logger("test")
        log.debug("debugged")
        log.info("informed")
        log.warning("warned")
        log.error("failed")
        assert [json.loads(line)["event"] for line in err_lines(capsys)] == ["warned", "failed"]

    def test_level_names_are_case_insensitive(self, capsys: pytest.CaptureFixture[str]) -> None:
        configure_logging("json", "DEBUG")
        structlog.get_logger("test").debug("debugged")
        assert [json.loads(line)["event"] for line in err_lines(capsys)] == ["debugged"]

    def test_exceptions_become_structured_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        configure_logging("json")
        try:
            raise OSError("disk full")
        except OSError:
            structlog.get_logger("test").exception("checkpoint_failed")
        (line,) = err_lines(capsys)
        record = json.loads(line)
        assert record["level"] == "error"
        assert record["exception"][0]["exc_type"] == "OSError"
        assert record["exception"][0]["exc_value"] == "disk full"

    def test_console_format_is_not_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        configure_logging("console")
        structlog.get_logger("test").info("state_loaded", players=3)
        (line,) = err_lines(capsys)
        assert "state_loaded" in line
        assert "players=3" in line
        with pytest.raises(json.JSONDecodeError):
            json.loads(line)

    def test_reconfiguring_takes_effect_for_existing_loggers(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        log = structlog.get_logger("test")
        configure_logging("json", "error")
        log.warning("hidden")
        configure_logging("json", "info")
        log.warning("shown")
        assert [json.loads(line)["event"] for line in err_lines(capsys)] == ["shown"]

    @pytest.mark.parametrize(("fmt", "level"), [("xml", "info"), ("json", "verbose"), ("auto", "")])
    def test_unknown_format_or_level_is_refused_with_its_value(self, fmt: str, level: str) -> None:
        with pytest.raises(ValueError, match=repr(fmt) if fmt == "xml" else repr(level)):
            configure_logging(fmt, level)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class TestAutoFormat:
    """ "auto" means JSON under systemd or without a terminal, console on a terminal."""

    def test_terminal_without_systemd_is_console(self) -> None:
        assert json_wanted("auto", Tty(), {}) is False

    def test_pipe_or_file_is_json(self) -> None:
        assert json_wanted("auto", io.StringIO(), {}) is True
        assert json_wanted("auto", None, {}) is True

    @pytest.mark.parametrize("variable", ["JOURNAL_STREAM", "INVOCATION_ID"])
    def test_systemd_is_json_even_on_a_terminal(self, variable: str) -> None:
        assert json_wanted("auto", Tty(), {variable: "8:12345"}) is True

    def test_explicit_formats_win(self) -> None:
        assert json_wanted("console", io.StringIO(), {"JOURNAL_STREAM": "8:1"}) is False
        assert json_wanted("json", Tty(), {}) is True
