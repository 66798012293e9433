"""End to end: a real daemon follows a games.log, reads its chat, and answers through a real
OpenArena server's rcon; the server's console shows each command it accepted."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from daemon_harness import DaemonProcess
from oaserver import PASSWORD, OpenArenaServer, rcon

SOURCE_KEY = "tail:{log}"


def oa_log_header(stamp: datetime) -> list[str]:
    ts = stamp.strftime("%Y-%m-%d %H:%M:%S")
    return [
        f"  0:00 InitGame: \\sv_hostname\\test\\g_gametype\\0\\mapname\\oa_dm1\\g_timestamp\\{ts}",
        # Slot 0 is Sarge, as on the real server (its bot on client 0): replies go to client 0.
        "  0:00 ClientUserinfoChanged: 0 n\\^1Sarge\\t\\0\\model\\sarge\\hmodel\\sarge\\c1\\4\\id\\",
        "  0:00 ClientUserinfoChanged: 1 n\\Grunt\\t\\0\\model\\grunt\\hmodel\\grunt\\c1\\4\\id\\",
        "  0:00 ClientUserinfoChanged: 2 n\\Major\\t\\0\\model\\major\\hmodel\\major\\c1\\4\\id\\",
    ]


def kills(n: int, start: int = 5) -> list[str]:
    out = []
    for k in range(n):
        killer, victim = [(0, 1), (0, 2), (1, 2), (2, 1), (1, 0)][k % 5]
        at = start + 20 * k  # apart enough for the §2.1 cooldown to let most of them count
        out.append(f"{at // 60:3d}:{at % 60:02d} Kill: {killer} {victim} 7: x killed y by MOD_RAILGUN")
    return out


def append(path: Path, lines: list[str]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def config(tmp: Path, log: Path, port: int, password: str, announce: str = "[]") -> Path:
    secret = tmp / "rcon.secret"
    secret.write_text(password + "\n")
    cfg = tmp / "arenad.toml"
    cfg.write_text(
        "[daemon]\nmax_event_age = 1e10\n"
        f'[[tail]]\nformat = "openarena"\npath = "{log}"\nserver = "oa-1"\nfrom_start = true\n'
        f"[ingame]\nenabled = true\nannounce = {announce}\nplayer_burst = 20\nfailure_log_interval = 0\n"
        f'[[ingame.servers]]\nname = "oa-1"\nkind = "quake3"\naddress = "127.0.0.1:{port}"\n'
        f'password_file = "{secret}"\n'
    )
    return cfg


def applied(d: DaemonProcess, log: Path, n: int) -> None:
    key = SOURCE_KEY.format(log=log)
    d.wait_for(lambda s: s["received"].get(key, 0) >= n and decided(s) >= n)


def decided(s: dict[str, Any]) -> int:
    """Kills the engine has taken a decision on (rated, filtered or refused)."""
    return int(
        s["applied"] + s["filtered"] + sum(s["rejected"].values()) + sum(s["rejected_by_daemon"].values())
    )


class TestInGameCommands:
    """Chat lines appended to the followed log are answered with `tell` on the real server."""

    def test_commands_answered_over_rcon(self, tmp_path: Path, oa_server: OpenArenaServer) -> None:
        log = tmp_path / "games.log"
        # The map started half an hour ago, so its 20 minutes of kills are all in the past.
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
        append(log, oa_log_header(start) + kills(60))
        cfg = config(tmp_path, log, oa_server.port, PASSWORD, announce='["top1"]')
        d = DaemonProcess(tmp_path / "state", config=cfg)
        try:
            mark = oa_server.mark()
            d.start(udp="off")
            applied(d, log, 60)
            # Backlog chat is never answered: this line was read before the follower caught up.
            # The first kills made a #1 out of nobody: said on the server.
            oa_server.wait_console(r"^Rcon from 127\.0\.0\.1: say \S+ is the new \^2#1", start=mark)

            mark = oa_server.mark()
            append(log, ["  3:10 say: ^1Sarge: !rank"])
            line = oa_server.wait_console(r"^Rcon from 127\.0\.0\.1: tell 0 ", start=mark)
            assert "Sarge" in line and ("rank" in line or "unplaced" in line)
            rank = d.query({"op": "get", "player": "name:Sarge"})
            assert rank["ok"] and (f"#{rank['rank']}^7 of 3" in line or "unplaced" in line)
            # ioquake3 prints a '%' as '.', hence "pct" in the default template.
            assert line.endswith(f"better than {rank['percentile']:.0f} pct")

            for text, want in [
                ("!top 3", r"tell 0 Top 3 of 3:"),
                ("!next", r"tell 0 \^3Sarge\^7: "),
                ("!session", r"tell 0 \^3Sarge\^7: "),
                ("!tier", r"tell 0 \^3Sarge\^7: "),
                ("!top banana", r"tell 0 usage: !top \[1-5\]"),
                ("!rank ;quit", r"tell 0 \^3quit\^7: no rating yet"),  # the ';' never reaches the server
                ('!rank "; quit', r"tell 0 \^3 quit\^7: no rating yet"),
            ]:
                mark = oa_server.mark()
                append(log, [f"  3:11 say: Sarge: {text}"])
                got = oa_server.wait_console(r"^Rcon from 127\.0\.0\.1: " + want, start=mark)
                assert ";" not in got and '"' not in got
            assert oa_server.alive() and "map: oa_dm1" in rcon(oa_server.port, "status")

            # Ignored: not a command, an unknown one, a name two slots share is not in this log.
            append(log, ["  3:12 say: Sarge: gg", "  3:12 say: Sarge: !quit", "  3:12 say: Nobody: !rank"])
            d.wait_for(lambda s: s["tails"][SOURCE_KEY.format(log=log)]["chat"] >= 11)
            assert d.metric("arenad_ingame_chat_total", 'outcome="ignored"') == 2
            assert d.metric("arenad_ingame_chat_total", 'outcome="unresolved"') == 1
            assert d.metric("arenad_ingame_chat_total", 'outcome="usage"') == 1
            assert d.metric("arenad_ingame_commands_total", 'command="rank"') == 3
            sent = d.metric("arenad_ingame_replies_total", 'result="sent"')
            assert sent >= 9  # 8 replies and at least one announcement
            assert d.metric("arenad_ingame_replies_total", 'result="failed"') == 0
            assert d.stop() == 0
        finally:
            d.kill()

    def test_wrong_password_is_counted_and_the_daemon_goes_on(
        self, tmp_path: Path, oa_server: OpenArenaServer
    ) -> None:
        log = tmp_path / "games.log"
        append(
            log, oa_log_header(datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)) + kills(5)
        )
        d = DaemonProcess(tmp_path / "state", config=config(tmp_path, log, oa_server.port, "wrong"))
        try:
            d.start(udp="off")
            applied(d, log, 5)
            mark = oa_server.mark()
            append(log, ["  1:00 say: Sarge: !rank"])
            oa_server.wait_console(r"^Bad rcon from 127\.0\.0\.1: tell 0 ", start=mark)
            deadline = time.monotonic() + 20
            while d.metric("arenad_ingame_rcon_failures_total", 'reason="auth",server="oa-1"') < 1:
                assert time.monotonic() < deadline, d.metrics()
                time.sleep(0.05)
            assert any('"event": "rcon_failed"' in x or '"event":"rcon_failed"' in x for x in d.log_lines)
            # Kills still flow and are rated.
            append(log, kills(3, start=200))
            applied(d, log, 8)
            assert d.stop() == 0
        finally:
            d.kill()
