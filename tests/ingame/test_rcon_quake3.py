"""arenad's ioquake3 rcon client against a real OpenArena 0.8.8 dedicated server on loopback."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

import pytest
from oaserver import PASSWORD, OpenArenaServer, free_udp_port, rcon

from arenad.ingame.rcon import Quake3Rcon, RconAuthError, RconTimeoutError, quake3_text


def send(client: Quake3Rcon, call: Callable[[Quake3Rcon], Awaitable[str]], *, retry: bool = True) -> str:
    """One call on ``client`` in a fresh loop, the client closed inside it; bounded in time."""

    async def main() -> str:
        try:
            # ioquake3 drops rcon over its per-address limit before running it: try again.
            for _ in range(4):
                try:
                    return await asyncio.wait_for(call(client), 20)
                except RconTimeoutError:
                    if not retry:
                        raise
            return await asyncio.wait_for(call(client), 20)
        finally:
            client.close()

    return asyncio.run(main())


@pytest.fixture
def oa(oa_server: OpenArenaServer) -> OpenArenaServer:
    return oa_server


class TestSanitiser:
    """Nothing a player types can end the command or open a second one."""

    @pytest.mark.parametrize(
        ("raw", "safe"),
        [
            ("hello;quit", "helloquit"),
            ('"; quit', "quit"),
            ("a\nquit", "a quit"),
            ("a\rquit", "a quit"),
            ("x // comment", "x / / comment"),
            ("x /* c */", "x / * c */"),
            ("^1red ^7white", "^1red ^7white"),  # colour codes are allowed through
        ],
    )
    def test_cases(self, raw: str, safe: str) -> None:
        assert quake3_text(raw) == safe

    def test_long_text_is_cut(self) -> None:
        assert len(quake3_text("x" * 1000)) == 150


class TestRealServer:
    """Each reply lands: the server prints `Rcon from` and runs exactly the command sent."""

    def test_tell_reaches_the_player(self, oa: OpenArenaServer) -> None:
        client = Quake3Rcon("127.0.0.1", oa.port, PASSWORD)
        mark = oa.mark()
        out = send(client, lambda c: c.tell("0", "^3Sarge^7: rank #1 of 2"))
        # The effect: ioquake3's SV_ConTell_f prints what it sent to client 0.
        assert out == "console_tell: ^3Sarge^7: rank #1 of 2\n"
        oa.wait_console(r"^Rcon from 127\.0\.0\.1: tell 0 \^3Sarge\^7: rank #1 of 2$", start=mark)

    def test_say_reaches_everyone(self, oa: OpenArenaServer) -> None:
        client = Quake3Rcon("127.0.0.1", oa.port, PASSWORD)
        mark = oa.mark()
        out = send(client, lambda c: c.say("Sarge is the new #1"))
        assert out == "console: Sarge is the new #1\n"
        oa.wait_console(r"^Rcon from 127\.0\.0\.1: say Sarge is the new #1$", start=mark)

    @pytest.mark.parametrize("hostile", [";quit", '"; quit', "x\nquit", "a;killserver", "// ;quit"])
    def test_no_second_command(self, oa: OpenArenaServer, hostile: str) -> None:
        """A name or argument carrying `;quit` is one tell's text: the server does not quit."""
        client = Quake3Rcon("127.0.0.1", oa.port, PASSWORD)
        mark = oa.mark()
        out = send(client, lambda c: c.tell("0", f"unknown player {hostile}"))
        assert isinstance(out, str) and out.startswith("console_tell: unknown player")
        line = oa.wait_console(r"^Rcon from 127\.0\.0\.1: tell 0 ", start=mark)
        assert ";" not in line and '"' not in line
        # Still serving: the status answer comes from the same process, which has not quit.
        assert "map: oa_dm1" in rcon(oa.port, "status")
        assert oa.alive()

    def test_wrong_password_is_refused(self, oa: OpenArenaServer) -> None:
        client = Quake3Rcon("127.0.0.1", oa.port, "wrong")
        mark = oa.mark()
        with pytest.raises(RconAuthError, match="Bad rconpassword"):
            send(client, lambda c: c.say("should not be said"))
        oa.wait_console(r"^Bad rcon from 127\.0\.0\.1: say should not be said$", start=mark)
        assert not any(re.match(r"^Rcon from .*should not be said", line) for line in oa.lines[mark:])

    def test_nobody_listening_times_out(self) -> None:
        client = Quake3Rcon("127.0.0.1", free_udp_port(), PASSWORD, timeout=0.3)
        with pytest.raises((RconTimeoutError, Exception)) as err:
            send(client, lambda c: c.say("hello"), retry=False)
        # On loopback the kernel answers a closed port with ICMP: unreachable, or a timeout.
        assert getattr(err.value, "reason", "") in ("timeout", "unreachable")

    def test_client_numbers_only(self) -> None:
        client = Quake3Rcon("127.0.0.1", 1, PASSWORD)
        with pytest.raises(Exception, match="client number"):
            send(client, lambda c: c.tell("0;quit", "x"))
