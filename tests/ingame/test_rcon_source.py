"""arenad's Source RCON client against a test server written from Valve's published protocol.

No Source dedicated server can run here (SteamCMD downloads, no licence for CS2 on CI), so
``FakeSourceServer`` follows https://developer.valvesoftware.com/wiki/Source_RCON_Protocol:
packets ``int32 size, int32 id, int32 type, body\\0, \\0`` little-endian; ``SERVERDATA_AUTH`` (3)
answered by an empty ``RESPONSE_VALUE`` (0) then ``AUTH_RESPONSE`` (2) with the id, or -1 for a
bad password (after which the real server closes the connection); ``EXECCOMMAND`` (2) answered by
``RESPONSE_VALUE`` packets split at 4096 bytes; an empty ``RESPONSE_VALUE`` request mirrored,
followed by the real server's quirk packet (body ``\\x00\\x01\\x00\\x00``). Like the Source console
it splits a command line on ``;`` and newlines outside quotes, so an injection would show up as
a second command in ``executed``.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest

from arenad.ingame.rcon import (
    RconAuthError,
    RconProtocolError,
    RconUnreachableError,
    SourceRcon,
    source_text,
)

AUTH, AUTH_RESPONSE, EXEC, RESPONSE = 3, 2, 2, 0


def split_commands(line: str) -> list[str]:
    """The Source console's split of one line into commands (';' and newlines outside quotes)."""
    out, cur, quoted = [], "", False
    for ch in line:
        if ch == '"':
            quoted = not quoted
        if ch in ";\n" and not quoted:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [c.strip() for c in out if c.strip()]


class FakeSourceServer:
    def __init__(self, password: str = "pw", long_reply: int = 0) -> None:
        self.password = password
        self.long_reply = long_reply
        self.executed: list[str] = []
        self.auth_failures = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> FakeSourceServer:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @staticmethod
    def packet(rid: int, kind: int, body: bytes) -> bytes:
        payload = struct.pack("<ii", rid, kind) + body + b"\x00\x00"
        return struct.pack("<i", len(payload)) + payload

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        authed = False
        try:
            while True:
                (size,) = struct.unpack("<i", await reader.readexactly(4))
                data = await reader.readexactly(size)
                rid, kind = struct.unpack("<ii", data[:8])
                body = data[8:-2].decode()
                if kind == AUTH:
                    writer.write(self.packet(rid, RESPONSE, b""))
                    if body == self.password:
                        authed = True
                        writer.write(self.packet(rid, AUTH_RESPONSE, b""))
                    else:
                        self.auth_failures += 1
                        writer.write(self.packet(-1, AUTH_RESPONSE, b""))
                        await writer.drain()
                        return
                elif not authed:
                    return  # the real server drops an unauthenticated connection
                elif kind == EXEC:
                    commands = split_commands(body)
                    self.executed.extend(commands)
                    reply = ("x" * self.long_reply if self.long_reply else f"ran {len(commands)}\n").encode()
                    for k in range(0, max(len(reply), 1), 4096):
                        writer.write(self.packet(rid, RESPONSE, reply[k : k + 4096]))
                elif kind == RESPONSE:
                    writer.write(self.packet(rid, RESPONSE, b""))
                    writer.write(self.packet(rid, RESPONSE, b"\x00\x01\x00\x00"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def run(test: Callable[[FakeSourceServer], Awaitable[None]], **kw: int | str) -> None:
    async def main() -> None:
        server = await FakeSourceServer(**kw).start()  # type: ignore[arg-type]
        try:
            await asyncio.wait_for(test(server), 20)
        finally:
            await server.close()

    asyncio.run(main())


class TestSourceRcon:
    """Auth, commands, multi-packet answers and refusals, over the published protocol."""

    def test_psay_is_one_command(self) -> None:
        async def test(server: FakeSourceServer) -> None:
            client = SourceRcon("127.0.0.1", server.port, "pw")
            try:
                out = await client.tell("#7", "Alice: rank #3 of 41")
                out2 = await client.say("Alice is the new #1")
            finally:
                client.close()
            assert out == "ran 1\n" and out2 == "ran 1\n"
            assert server.executed == ['sm_psay #7 "Alice: rank #3 of 41"', "say Alice is the new #1"]

        run(test)

    @pytest.mark.parametrize("hostile", [";quit", '"; quit', "x\nquit", '"";exit;"'])
    def test_no_second_command(self, hostile: str) -> None:
        async def test(server: FakeSourceServer) -> None:
            client = SourceRcon("127.0.0.1", server.port, "pw")
            try:
                await client.tell("#2", f"no player {hostile}")
                await client.say(f"hi {hostile}")
            finally:
                client.close()
            assert len(server.executed) == 2, server.executed
            assert server.executed[0].startswith('sm_psay #2 "no player')
            assert not any(c in ("quit", "exit") for c in server.executed)

        run(test)

    def test_long_answer_in_several_packets(self) -> None:
        async def test(server: FakeSourceServer) -> None:
            client = SourceRcon("127.0.0.1", server.port, "pw")
            try:
                out = await client.command("status")
            finally:
                client.close()
            assert out == "x" * 10_000

        run(test, long_reply=10_000)

    def test_wrong_password(self) -> None:
        async def test(server: FakeSourceServer) -> None:
            client = SourceRcon("127.0.0.1", server.port, "nope")
            try:
                with pytest.raises(RconAuthError):
                    await client.say("hi")
            finally:
                client.close()
            assert server.auth_failures == 1 and server.executed == []

        run(test)

    def test_reconnects_after_the_server_drops(self) -> None:
        async def test(server: FakeSourceServer) -> None:
            client = SourceRcon("127.0.0.1", server.port, "pw")
            try:
                await client.say("one")
                assert client._stream is not None
                client._stream[1].close()  # as if the server had restarted
                with pytest.raises((RconUnreachableError, RconProtocolError)):
                    await client.say("lost")
                await client.say("two")  # a new connection, authenticated again
            finally:
                client.close()
            assert server.executed[0] == "say one" and server.executed[-1] == "say two"

        run(test)

    def test_unreachable(self) -> None:
        async def main() -> None:
            server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            server.close()
            await server.wait_closed()
            client = SourceRcon("127.0.0.1", port, "pw", timeout=1.0)
            with pytest.raises(RconUnreachableError):
                await client.say("x")

        asyncio.run(asyncio.wait_for(main(), 20))

    def test_userid_targets_only(self) -> None:
        async def test(server: FakeSourceServer) -> None:
            client = SourceRcon("127.0.0.1", server.port, "pw")
            with pytest.raises(RconProtocolError):
                await client.tell('#1";quit', "x")
            client.close()

        run(test)

    def test_text(self) -> None:
        assert source_text('a";quit\nb') == "aquit b"
