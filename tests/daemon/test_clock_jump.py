"""Wall-clock steps in a real daemon process.

The host's clock cannot be stepped here without disturbing everything else on the machine, so
the daemon runs with a tiny LD_PRELOAD library (compiled by the test with the system C compiler)
that adds an offset, read from a file, to CLOCK_REALTIME only; the monotonic clock stays real,
as on a host whose clock is stepped by NTP or ``date -s``. Game servers keep sending true
timestamps throughout.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from daemon_harness import DaemonProcess
from waiting import wait_until

from arenad.core.engine import Engine
from arenad.core.params import ADRParams
from arenad.daemon.state import Checkpoints

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);

int clock_gettime(clockid_t id, struct timespec *ts) {
    if (!real_clock_gettime) real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    int r = real_clock_gettime(id, ts);
    const char *path = getenv("ARENAD_TEST_WALL_OFFSET_FILE");
    if (r == 0 && id == CLOCK_REALTIME && path) {
        FILE *f = fopen(path, "r");
        double offset = 0.0;
        if (f) {
            if (fscanf(f, "%lf", &offset) != 1) offset = 0.0;
            fclose(f);
        }
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + (long long)(offset * 1e9);
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return r;
}
"""

ADOPT_AFTER = 3.0


@pytest.fixture
def shim(tmp_path: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "a C compiler is needed (scripts/test installs gcc where it is missing)"
    src = tmp_path / "wallshift.c"
    src.write_text(SHIM)
    lib = tmp_path / "wallshift.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl"], check=True, timeout=60)
    return lib


def kills(n: int, start: int) -> list[dict[str, Any]]:
    """True timestamps, as a game server with a good clock sends them."""
    now = time.time()
    return [
        {"t": now - n + k, "attacker": f"p{(start + k) % 9}", "victim": f"p{(start + k + 4) % 9}"}
        for k in range(n)
    ]


def test_host_clock_steps_do_not_refuse_valid_events_until_adopted(tmp_path: Path, shim: Path) -> None:
    offset = tmp_path / "offset"
    offset.write_text("0")
    config = tmp_path / "a.toml"
    config.write_text(f"[daemon]\nclock_adopt_after = {ADOPT_AFTER}\ncheckpoint_interval = 0.5\n")
    d = DaemonProcess(
        tmp_path / "state",
        config=config,
        env={"LD_PRELOAD": str(shim), "ARENAD_TEST_WALL_OFFSET_FILE": str(offset)},
    )
    accepted: list[dict[str, Any]] = []
    received = [0]  # what the daemon counts as received so far: events, and one per empty datagram

    def send_and_count(events: list[dict[str, Any]]) -> dict[str, Any]:
        d.send_udp(msgpack.packb(events))
        received[0] += max(len(events), 1)  # an empty array is one reject
        return d.wait_for(lambda s: sum(s["received"].values()) >= received[0])

    def prod_until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        """Empty datagrams until ``condition``: each makes the daemon read its clock, which looks
        at the host's at most every 0.25 s (``DaemonClock.check_every``)."""

        def prodded() -> bool:
            send_and_count([])
            return condition()

        wait_until(prodded, what, timeout, poll=0.05)

    def jumps() -> float:
        return d.metric("arenad_wall_clock_jumps_total")

    def adopted() -> int:
        return sum('"wall_clock_adopted"' in line for line in list(d.log_lines))

    d.start()
    try:
        batch = kills(40, 0)
        send_and_count(batch)
        accepted += batch
        # The host clock steps an hour back: true timestamps look an hour ahead of it.
        offset.write_text("-3600")
        prod_until(lambda: jumps() == 1, "the step back seen")
        batch = kills(40, 1)
        stats = send_and_count(batch)
        accepted += batch
        assert stats["rejected_by_daemon"].get("future_time", 0) == 0
        assert jumps() == 1
        assert d.metric("arenad_wall_clock_offset_seconds") == pytest.approx(-3600, abs=5)
        # It comes back before adoption: forgotten, nothing refused.
        offset.write_text("0")
        prod_until(lambda: abs(d.metric("arenad_wall_clock_offset_seconds")) < 1, "the step back undone")
        batch = kills(40, 2)
        send_and_count(batch)
        accepted += batch
        assert adopted() == 0
        # A step two hours ahead that persists is adopted after clock_adopt_after seconds; true
        # timestamps are then two hours old, well inside max_event_age: still rated.
        offset.write_text("7200")
        prod_until(lambda: jumps() == 2, "the step ahead seen")
        batch = kills(40, 4)
        send_and_count(batch)
        accepted += batch
        prod_until(lambda: adopted() == 1, "the step ahead adopted", timeout=ADOPT_AFTER + 10)
        batch = kills(40, 5)
        stats = send_and_count(batch)
        accepted += batch
        assert jumps() == 2
        assert d.metric("arenad_wall_clock_offset_seconds") == pytest.approx(0, abs=1)
        # A persistent step an hour back is adopted too: from then on true timestamps are an
        # hour in the future by this host's clock and are refused with that reason, not lost
        # silently; the daemon stays up.
        offset.write_text("-3600")
        prod_until(lambda: jumps() == 3, "the second step back seen")
        prod_until(lambda: adopted() == 2, "the second step back adopted", timeout=ADOPT_AFTER + 10)
        stats = send_and_count(kills(30, 6))
        assert stats["rejected_by_daemon"]["future_time"] == 30
        assert stats["journal_seq"] == len(accepted)
        # Monotonic timers never noticed: checkpoints kept being written.
        assert d.metric("arenad_checkpoint_failures_total") == 0
        assert d.stop() == 0
    finally:
        d.kill()
    eng = Engine(ADRParams())
    for ev in accepted:
        eng.feed(ev["attacker"], ev["victim"], ev["t"])
    (_seq, path), *_ = Checkpoints(tmp_path / "state").list()
    saved = Checkpoints.read(path)["scopes"]["engines"]["global"]
    want = msgpack.unpackb(msgpack.packb(eng.export_state()), raw=False, strict_map_key=False)
    assert saved == want


@pytest.mark.parametrize("clamp", [True, False])
def test_a_game_server_with_a_fast_clock_cannot_push_the_others_out(tmp_path: Path, clamp: bool) -> None:
    """One server's clock runs 200 s ahead (inside max_clock_skew); a good server keeps sending.

    With clamp_future (the default) the fast server's kills are rated at their arrival and the
    good server loses nothing; without it the rating clock jumps ahead and the good server's
    kills are refused as out_of_order: the hazard the default exists for."""
    config = tmp_path / "a.toml"
    config.write_text(f"[daemon]\nclamp_future = {'true' if clamp else 'false'}\n")
    d = DaemonProcess(tmp_path / "state", config=config).start()
    try:
        now = time.time()
        fast = [
            {
                "t": now + 200 + k * 0.01,
                "attacker": f"f{k % 5}",
                "victim": f"f{(k + 2) % 5}",
                "server": "fast",
            }
            for k in range(30)
        ]
        d.send_events(fast)
        d.wait_for(lambda s: s["journal_seq"] == 30 and s["queue_depth"] == 0)
        t0 = time.time() - 1
        good = [
            {"t": t0 + k * 0.01, "attacker": f"g{k % 5}", "victim": f"g{(k + 2) % 5}", "server": "good"}
            for k in range(30)
        ]
        d.send_events(good)
        stats = d.wait_for(lambda s: s["journal_seq"] == 60 and s["queue_depth"] == 0)
        out_of_order = stats["rejected"].get("out_of_order", 0)
        if clamp:
            assert d.metric("arenad_events_time_clamped_total") == 30
            assert out_of_order == 0
            assert stats["clock"] < time.time() + 1  # the rating clock never ran ahead
        else:
            assert d.metric("arenad_events_time_clamped_total") == 0
            assert out_of_order == 30
        assert d.stop() == 0
    finally:
        d.kill()
