"""Shadow models in a real ``arenad run`` process, fed over real UDP: their live scores are the offline
ones, match placements reach the models that rate matches, and restarts (SIGTERM, kill -9) continue
every model exactly where the acknowledged events left it."""

from __future__ import annotations

import math
import random
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from daemon_harness import DaemonProcess

from arenad.daemon.emit import simulated_kills
from arenad.daemon.state import Checkpoints, PlacementRecord, read_records
from arenad.evaluation import metrics
from arenad.models import BUILTIN_MODELS, placement_pairs, rates_matches
from arenad.models.base import predict_placement

KILL_SHADOWS = ("elo", "glicko2", "trueskill")
#: Built-in models that also rate match placements (TrueSkill FFA, Glicko-2 MP-weighted).
MATCH_SHADOWS = ("trueskill-ffa", "glicko2-mp")
FIGURES = ("log_loss", "brier", "ece", "auc")


def write_config(
    tmp_path: Path,
    shadows: tuple[str, ...],
    window: int,
    checkpoint_interval: float = 60.0,
    primary: str = "adr",
) -> Path:
    path = tmp_path / "arenad.toml"
    names = ", ".join(f'"{n}"' for n in shadows)
    models = f'[models]\nprimary = "{primary}"\nshadows = [{names}]\nwindow = {window}\n'
    path.write_text(models + f"[daemon]\ncheckpoint_interval = {checkpoint_interval}\n")
    return path


def kills(n: int, seed: int, start: float | None = None) -> list[dict[str, Any]]:
    """Kills one second apart ending about now (so the daemon's clock checks accept them)."""
    t0 = time.time() - n if start is None else start
    return list(simulated_kills(30, n, seed=seed, start=t0, rate=1.0))


def with_placements(n: int, seed: int, every: int = 15) -> list[dict[str, Any]]:
    """Kills with a match placement of 4-8 of the same players in place of every ``every``-th."""
    rng = random.Random(seed)
    out = kills(n, seed)
    for k in range(every - 1, n, every):
        players = [f"player{i:04d}" for i in rng.sample(range(30), rng.randint(4, 8))]
        groups: list[list[str]] = []
        for player in players:  # some neighbours tie
            if groups and rng.random() < 0.25:
                groups[-1].append(player)
            else:
                groups.append([player])
        out[k] = {"t": out[k]["t"], "placements": groups, "server": "sim-1", "id": f"match-{seed}-{k}"}
    return out


def offline(names: tuple[str, ...], evs: list[dict[str, Any]], window: int) -> dict[str, dict[str, Any]]:
    """Fresh models fed the events as the daemon feeds its models, and the same windowed figures
    computed from scratch: the last ``window`` predictions, prediction m shown reversed when m
    is odd, then the offline metric functions."""
    models = {name: BUILTIN_MODELS[name]() for name in names}
    predictions: dict[str, list[float]] = {name: [] for name in names}
    for ev in evs:
        for name, model in models.items():
            if "placements" in ev:
                pairs = placement_pairs(ev["placements"])
                predictions[name] += [predict_placement(model, a, b, ev["t"]) for a, b in pairs]
                if rates_matches(model):
                    model.update_match(ev["placements"], ev["t"])  # type: ignore[attr-defined]
            else:
                predictions[name].append(model.predict(ev["attacker"], ev["victim"], ev["t"]))
                model.update(ev["attacker"], ev["victim"], ev["t"])
    out: dict[str, dict[str, Any]] = {}
    for name, ps in predictions.items():
        first = max(0, len(ps) - window)
        shown = [1.0 - ps[m] if m % 2 else ps[m] for m in range(first, len(ps))]
        y = [0.0 if m % 2 else 1.0 for m in range(first, len(ps))]
        out[name] = {
            "predictions": len(ps),
            "window": len(shown),
            "log_loss": metrics.log_loss(shown, y),
            "brier": metrics.brier(shown, y),
            "ece": metrics.ece(shown, y),
            "auc": metrics.auc(shown, y),
            "model": models[name],
        }
    return out


def wait_scored(daemon: DaemonProcess, expected: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Stats once every model has made every prediction of ``expected`` and its scores are of all
    of them (journaled events count in ``journal_seq`` before the engine has applied them)."""
    want = {name: (e["predictions"], e["predictions"]) for name, e in expected.items()}
    # The scores are recomputed at most once a second: wait until they are of every prediction.
    return daemon.wait_for(
        lambda s: {n: (m["predictions"], m["scored"]) for n, m in s["models"].items()} == want
    )


def as_stored(state: object) -> object:
    """A model's exported state as a checkpoint gives it back (msgpack turns tuples into lists)."""
    return msgpack.unpackb(msgpack.packb(state, use_bin_type=True), raw=False, strict_map_key=False)


def assert_live_figures(daemon: DaemonProcess, expected: dict[str, dict[str, Any]]) -> None:
    """The scrape and the stats query both carry the offline figures for every model."""
    stats = wait_scored(daemon, expected)["models"]
    text = daemon.metrics()
    assert set(stats) == set(expected)
    for figure in FIGURES:
        scraped = daemon.series(f"arenad_model_{figure}", "model", text)
        for name, want in expected.items():
            assert scraped[name] == pytest.approx(want[figure], rel=1e-9), (name, figure)
            assert stats[name][figure] == pytest.approx(want[figure], rel=1e-9), (name, figure)
    predictions = daemon.series("arenad_model_predictions_total", "model", text)
    in_window = daemon.series("arenad_model_window_predictions", "model", text)
    for name, want in expected.items():
        assert predictions[name] == stats[name]["predictions"] == want["predictions"], name
        assert in_window[name] == stats[name]["window"] == want["window"], name
        assert stats[name]["failed"] is None


def checkpointed_models(state_dir: Path) -> dict[str, Any]:
    """The shadow entries of the newest checkpoint."""
    (_seq, path), *_ = Checkpoints(state_dir).list()
    return dict(Checkpoints.read(path)["models"]["shadows"])


def assert_checkpoint_holds(state_dir: Path, expected: dict[str, dict[str, Any]]) -> None:
    saved = checkpointed_models(state_dir)
    for name, entry in saved.items():
        state = msgpack.unpackb(entry["state"], raw=False, strict_map_key=False)
        assert state == as_stored(expected[name]["model"].export_state()), name
        assert entry["window"]["count"] == expected[name]["predictions"], name


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    made: list[DaemonProcess] = []

    def make(
        shadows: tuple[str, ...], window: int, checkpoint_interval: float = 60.0, primary: str = "adr"
    ) -> DaemonProcess:
        config = write_config(tmp_path, shadows, window, checkpoint_interval, primary)
        d = DaemonProcess(tmp_path / "state", config=config)
        made.append(d)
        return d

    yield make
    for d in made:
        d.kill()


class TestScores:
    """Per-model log loss, Brier, ECE and AUC over the window are what the same models score offline
    (without shadows the primary is scored from the engine's own ring: test_quality_e2e.py)."""

    def test_kill_stream_scores_equal_fresh_models_offline(self, daemon: Any) -> None:
        d = daemon(KILL_SHADOWS, window=400).start()
        evs = kills(1200, seed=31)
        d.send_events(evs)
        assert_live_figures(d, offline(("adr", *KILL_SHADOWS), evs, 400))
        assert {f: s["role"] for f, s in d.stats()["models"].items()} == {
            "adr": "primary",
            "elo": "shadow",
            "glicko2": "shadow",
            "trueskill": "shadow",
        }
        # Shadows learn from every journaled kill, those ADR filters (cooldown) included.
        assert d.stats()["filtered"] > 0
        timed = d.series("arenad_model_update_seconds_count", "model")
        assert set(timed) == {"adr", *KILL_SHADOWS} and all(n > 0 for n in timed.values())

    def test_an_adr_variant_as_primary_and_plain_adr_as_its_shadow(self, daemon: Any) -> None:
        d = daemon(("adr",), window=200, primary="adr-printed").start()
        evs = kills(500, seed=33)
        d.send_events(evs)
        expected = offline(("adr-printed", "adr"), evs, 200)
        assert_live_figures(d, expected)
        assert d.stats()["models"]["adr-printed"]["role"] == "primary"
        # The ladder is the primary's: ADR with the literal §4.2 victim update.
        printed = expected["adr-printed"]["model"]
        for row in d.ladder():
            assert row["mu"] == pytest.approx(printed.rating(row["player"]), abs=1e-9), row["player"]
        assert printed.rating(evs[0]["attacker"]) != expected["adr"]["model"].rating(evs[0]["attacker"])


class TestPlacements:
    """Match placements over UDP are validated, journaled, never rated by ADR, scored by every model
    and rated by the models that rate matches."""

    def test_placements_reach_match_models_and_are_journaled(self, daemon: Any, tmp_path: Path) -> None:
        shadows = ("elo", *MATCH_SHADOWS)
        d = daemon(shadows, window=500).start()
        evs = with_placements(900, seed=41)
        matches = sum("placements" in e for e in evs)
        d.send_events(evs)
        expected = offline(("adr", *shadows), evs, 500)
        stats = wait_scored(d, expected)
        assert stats["journal_seq"] == len(evs)
        assert stats["placements"] == matches == d.metric("arenad_placements_total")
        assert stats["applied"] + stats["filtered"] == len(evs) - matches  # ADR rated only the kills
        assert_live_figures(d, expected)
        rated = d.series("arenad_model_matches_total", "model")
        assert rated == {"adr": 0, "elo": 0, "trueskill-ffa": matches, "glicko2-mp": matches}
        # The ladder is ADR over the kills alone.
        adr = expected["adr"]["model"]
        for row in d.ladder():
            assert row["mu"] == pytest.approx(adr.rating(row["player"]), abs=1e-9), row["player"]
        assert d.stop() == 0
        journaled = []
        for path in sorted((tmp_path / "state").glob("journal-*.log")):
            journaled += read_records(path.read_bytes())[0]
        placements = [r for r in journaled if isinstance(r, PlacementRecord)]
        assert len(journaled) == len(evs)
        assert [(r.t, [list(g) for g in r.placements], r.id) for r in placements] == [
            (e["t"], e["placements"], e["id"]) for e in evs if "placements" in e
        ]

    def test_placements_are_validated_like_kills(self, daemon: Any) -> None:
        d = daemon(MATCH_SHADOWS, window=100).start()
        now = time.time()
        match = {"t": now, "placements": [["ann"], ["bob", "cy"]], "server": "s1", "id": "m1"}
        d.send_events([match])
        d.wait_for(lambda s: s["placements"] == 1)
        d.send_udp(msgpack.packb({**match, "t": now + 1}))  # the same id again
        d.send_udp(msgpack.packb({**match, "id": "m2", "t": now + 3600}))
        d.send_udp(msgpack.packb({**match, "id": "m3", "t": now - 30 * 86400}))
        d.send_udp(msgpack.packb({"t": now, "placements": [["ann"], ["ann"]]}))  # placed twice
        stats = d.wait_for(lambda s: sum(s["rejected_by_daemon"].values()) >= 4)
        assert stats["rejected_by_daemon"] == {
            "duplicate_id": 1,
            "future_time": 1,
            "too_old": 1,
            "malformed": 1,
        }
        assert stats["placements"] == 1 and stats["journal_seq"] == 1
        assert d.series("arenad_model_matches_total", "model")["trueskill-ffa"] == 1
        # Pairs: ann over bob, ann over cy (bob and cy tied: no pair). ADR knows none of them.
        adr = d.wait_for(lambda s: s["models"]["adr"]["scored"] == 2)["models"]["adr"]
        assert adr["predictions"] == 2
        assert adr["log_loss"] == pytest.approx(math.log(2))


class TestRestarts:
    """After SIGTERM or kill -9 every model continues exactly where the journaled events left it."""

    def test_sigterm_restart_continues_every_model(self, daemon: Any) -> None:
        shadows = (*KILL_SHADOWS, *MATCH_SHADOWS)
        d = daemon(shadows, window=300).start()
        evs = with_placements(1000, seed=51)
        d.send_events(evs[:600])
        half = offline(("adr", *shadows), evs[:600], 300)
        before = wait_scored(d, half)["models"]
        assert d.stop() == 0
        assert_checkpoint_holds(d.state_dir, half)
        d.start()
        assert d.stats()["models"] == before
        d.send_events(evs[600:])
        assert_live_figures(d, offline(("adr", *shadows), evs, 300))

    def test_kill_9_mid_stream_recovers_the_models_of_the_journaled_prefix(self, daemon: Any) -> None:
        shadows = ("elo", "glicko2", *MATCH_SHADOWS)
        d = daemon(shadows, window=500, checkpoint_interval=1.0).start()
        evs = with_placements(3000, seed=61)
        d.send_events(evs[:1000])
        # A checkpoint holds the models at 1000 or later: recovery imports them from it and
        # replays the journal after it (usually part of the rest of the stream).
        d.wait_for(lambda s: s["checkpoint_seq"] >= 1000)

        def sender() -> None:
            for k in range(1000, len(evs), 25):
                if not d.alive():
                    return
                d.send_udp(msgpack.packb(evs[k : k + 25]))
                time.sleep(0.002)  # pacing: the stream is still flowing when the kill lands

        thread = threading.Thread(target=sender)
        thread.start()
        d.wait_for(lambda s: s["journal_seq"] >= 2000, timeout=60)
        d.kill()
        thread.join(30)
        d.start()
        recovered = d.stats()["journal_seq"]
        assert recovered >= 2000
        assert d.stats()["checkpoint_seq"] >= 1000
        # Loopback delivers in order, so what was journaled is a prefix of what was sent.
        expected = offline(("adr", *shadows), evs[:recovered], 500)
        assert_live_figures(d, expected)
        assert d.stop() == 0
        assert_checkpoint_holds(d.state_dir, expected)
