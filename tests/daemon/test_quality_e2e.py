"""ADR's own live quality in a real ``arenad run`` process without any shadow model, fed over real
UDP: the primary's log loss, Brier, ECE and AUC on /metrics and in ``stats`` are what
``arenad.evaluation.metrics`` gives on the predictions of a fresh ``Engine`` fed the same kills
offline (its ``recent_predictions``), and a restart starts the engine's ring empty."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from daemon_harness import DaemonProcess

from arenad.core.engine import QUALITY_WINDOW, Engine
from arenad.daemon.emit import simulated_kills
from arenad.evaluation import metrics
from arenad.settings import load_settings

FIGURES = ("log_loss", "brier", "ece", "auc")


def kills(n: int, seed: int, start: float) -> list[dict[str, Any]]:
    """Kills among 30 players one second apart from ``start``: repeats inside the cooldown happen."""
    return list(simulated_kills(30, n, seed=seed, start=start, rate=1.0))


def offline_engine(config: Path, evs: list[dict[str, Any]]) -> Engine:
    """A fresh engine with the daemon's [adr] parameters fed the same kills in the same order."""
    engine = Engine(load_settings(config).adr)
    for ev in evs:
        engine.feed(ev["attacker"], ev["victim"], ev["t"])
    return engine


def offline_figures(p: npt.NDArray[np.float64], count: int, window: int) -> dict[str, Any]:
    """The newest ``window`` of ``p`` (``p[-1]`` is prediction ``count - 1``), prediction m shown
    reversed when m is odd, scored by the offline metric functions."""
    kept = p[-window:]
    first = count - len(kept)
    shown = [1.0 - x if (first + k) % 2 else float(x) for k, x in enumerate(kept)]
    y = [0.0 if (first + k) % 2 else 1.0 for k in range(len(kept))]
    return {
        "predictions": count,
        "window": len(kept),
        "log_loss": metrics.log_loss(shown, y),
        "brier": metrics.brier(shown, y),
        "ece": metrics.ece(shown, y, 10),
        "auc": metrics.auc(shown, y),
    }


def wait_scored(daemon: DaemonProcess, predictions: int) -> dict[str, Any]:
    """Stats once the primary's scores are of ``predictions`` predictions (read at most once a
    second, so this waits for the reading after the last kill)."""
    stats = daemon.wait_for(lambda s: "adr" in s["models"] and s["models"]["adr"]["scored"] == predictions)
    return dict(stats["models"])


def assert_live(daemon: DaemonProcess, expected: dict[str, Any]) -> None:
    """/metrics and ``stats`` both carry exactly the offline figures of the primary, alone."""
    stats = wait_scored(daemon, expected["predictions"])
    assert set(stats) == {"adr"}
    adr = stats["adr"]
    assert adr["role"] == "primary" and adr["failed"] is None and adr["matches"] == 0
    text = daemon.metrics()
    for figure in FIGURES:
        scraped = daemon.series(f"arenad_model_{figure}", "model", text)
        assert set(scraped) == {"adr"}, figure
        assert scraped["adr"] == pytest.approx(expected[figure], rel=1e-12), figure
        assert adr[figure] == pytest.approx(expected[figure], rel=1e-12), figure
    assert daemon.series("arenad_model_predictions_total", "model", text) == {"adr": expected["predictions"]}
    assert daemon.series("arenad_model_window_predictions", "model", text) == {"adr": expected["window"]}
    assert adr["predictions"] == expected["predictions"] and adr["window"] == expected["window"]


def write_config(tmp_path: Path, window: int) -> Path:
    path = tmp_path / "arenad.toml"
    path.write_text(f"[models]\nshadows = []\nwindow = {window}\n[daemon]\ncheckpoint_interval = 60.0\n")
    return path


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    made: list[DaemonProcess] = []

    def make(window: int) -> tuple[DaemonProcess, Path]:
        config = write_config(tmp_path, window)
        d = DaemonProcess(tmp_path / "state", config=config)
        made.append(d)
        return d, config

    yield make
    for d in made:
        d.kill()


class TestPrimaryWithoutShadows:
    """With ``shadows = []`` the primary's scores come from the engine's own ring of predictions."""

    def test_live_scores_equal_a_fresh_engine_fed_the_same_kills(self, daemon: Any) -> None:
        d, config = daemon(window=400)
        d.start()
        evs = kills(1201, seed=71, start=time.time() - 1201)
        d.send_events(evs)
        engine = offline_engine(config, evs)
        p, count = engine.recent_predictions()
        # Every kill is predicted, the cooldown repeats ADR does not rate included.
        assert count == len(evs) and engine.filtered > 0
        expected = offline_figures(p, count, 400)
        assert expected["window"] == 400 and not math.isnan(expected["auc"])
        assert_live(d, expected)
        stats = d.stats()
        assert stats["applied"] == engine.applied and stats["filtered"] == engine.filtered
        # Nothing is timed per model: the engine task does no scoring work without shadows.
        assert d.series("arenad_model_update_seconds_count", "model") == {}

    def test_the_window_is_at_most_the_engine_ring(self, daemon: Any) -> None:
        d, config = daemon(window=10_000)  # the default window, larger than the ring
        d.start()
        evs = kills(QUALITY_WINDOW + 300, seed=72, start=time.time() - QUALITY_WINDOW - 300)
        d.send_events(evs)
        p, count = offline_engine(config, evs).recent_predictions()
        expected = offline_figures(p, count, 10_000)
        assert expected["window"] == QUALITY_WINDOW
        assert_live(d, expected)

    def test_a_restart_starts_the_ring_empty(self, daemon: Any) -> None:
        d, config = daemon(window=300)
        d.start()
        start = time.time() - 900
        evs = kills(900, seed=73, start=start)
        d.send_events(evs[:600])
        wait_scored(d, 600)
        assert d.stop() == 0  # a final checkpoint: nothing to replay at the next start
        d.start()
        adr = d.stats()["models"]["adr"]
        assert (adr["predictions"], adr["window"], adr["log_loss"]) == (0, 0, None)  # null: nan
        assert math.isnan(d.series("arenad_model_log_loss", "model")["adr"])
        d.send_events(evs[600:])
        # The ratings continue from the checkpoint, the ring and its numbering start afresh: the
        # last 300 predictions of an engine fed all 900 kills, numbered from 0.
        p, count = offline_engine(config, evs).recent_predictions()
        assert count == 900
        assert_live(d, offline_figures(p[-300:], 300, 300))
