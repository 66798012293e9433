"""Rcon clients: ioquake3 / OpenArena over UDP, and the Valve Source RCON protocol over TCP.

Everything arenad puts into a command line comes from players (names, chat) or from templates,
so it goes through ``quake3_text`` / ``source_text`` first: no byte of it can end the command
or start a second one.

**ioquake3** (``Quake3Rcon``): one datagram ``\\xff\\xff\\xff\\xffrcon <password> <command>``; the
server answers with datagrams ``\\xff\\xff\\xff\\xffprint\\n<output>`` (``Bad rconpassword.`` or
``No rconpassword set on the server.`` when refused). The server runs the rest of the line as
*one* command through ``Cmd_ExecuteString``, whose tokenizer still reads ``"`` as quoting and
``//`` and ``/*`` as the start of a comment; a ``;`` or a newline would split the line wherever
the text reaches a command buffer (a ``vstr``, a mod that re-executes it). Replies go as
``tell <client number> <text>`` (ioquake3's ``SV_ConTell_f``; OpenArena 0.8.8's server also has
``sayto``, which takes a *name*, so the number is safer), announcements as ``say <text>``.

**Source** (``SourceRcon``): a TCP stream of packets ``int32 size, int32 id, int32 type, body
NUL, NUL`` (little-endian; ``size`` counts from ``id`` on). ``SERVERDATA_AUTH`` (3) with the
password is answered by an empty ``SERVERDATA_RESPONSE_VALUE`` (0) and ``SERVERDATA_AUTH_RESPONSE``
(2) whose id is the request's, or -1 for a wrong password; ``SERVERDATA_EXECCOMMAND`` (2) by one
or more ``RESPONSE_VALUE`` packets with the request's id. Because a long answer is split into
several packets with no end marker, each command is followed by an empty ``RESPONSE_VALUE``
request, which the server mirrors after the command's last packet (Valve's documented idiom).
The connection is kept and re-opened (with a new ``AUTH``) after any failure. The Source console
splits a line on ``;`` and newlines outside quotes, so those are removed, as is ``"`` (the text is
quoted in ``sm_psay #<userid> "<text>"``, SourceMod's private message).

Why no library: the maintained Python one, ``rcon`` (conqp/rcon), is GPL-3.0 (arenad is MIT) and
its asyncio entry point opens, authenticates and closes a connection per command, which a busy
server's ``sv_rcon_maxfailures`` / ban logic and our rate limits would rather not see;
``aiorcon`` has had no release since 2018. The protocol is the four packet types above.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
from typing import Protocol

from arenad.errors import ArenadError

__all__ = [
    "Quake3Rcon",
    "Rcon",
    "RconAuthError",
    "RconError",
    "RconTimeoutError",
    "SourceRcon",
    "quake3_text",
    "source_text",
]

#: Longest text put into one command (ioquake3 chat holds 150 characters; Source 255).
MAX_TEXT = 150
#: Longest rcon datagram ioquake3 reads (MAX_MSGLEN is 16384; a sane command is far shorter).
MAX_DATAGRAM = 1024
#: Seconds to wait for more reply datagrams after the first (ioquake3 flushes its redirect
#: buffer in pieces of about 1 KB, all sent at once when the command ends).
_MORE = 0.05

SERVERDATA_AUTH = 3
SERVERDATA_AUTH_RESPONSE = 2
SERVERDATA_EXECCOMMAND = 2
SERVERDATA_RESPONSE_VALUE = 0
#: Largest Source RCON packet accepted (the server sends bodies of at most 4096 bytes).
MAX_SOURCE_PACKET = 4096 + 10 + 4096

_OOB = b"\xff\xff\xff\xff"
_PRINT = b"print\n"
# Control characters (the line ends, tabs, NUL), DEL and the C1 controls some consoles read.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_QUAKE_BAD = re.compile(r'[;"]')
_COMMENT = re.compile(r"/(?=[/*])")  # a '/' that would start "//" or "/*"


class RconError(ArenadError):
    """An rcon command that could not be delivered (``reason`` labels the failure metric)."""

    reason = "error"


class RconTimeoutError(RconError):
    reason = "timeout"


class RconAuthError(RconError):
    reason = "auth"


class RconUnreachableError(RconError):
    reason = "unreachable"


class RconProtocolError(RconError):
    reason = "protocol"


def quake3_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` made safe as the arguments of one ioquake3 command: no control characters, no
    ``;`` or ``"``, no ``//`` or ``/*``, at most ``limit`` characters, no leading blank."""
    text = _CONTROL.sub(" ", text)
    text = _QUAKE_BAD.sub("", text)
    text = _COMMENT.sub("/ ", text)
    return text.strip()[:limit].rstrip()


def source_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` made safe inside ``"..."`` of one Source console command."""
    text = _CONTROL.sub(" ", text)
    text = _QUAKE_BAD.sub("", text)
    return text.strip()[:limit].rstrip()


class Rcon(Protocol):
    """What the in-game room needs from a server: a private line to one player, a public one."""

    async def tell(self, target: str, text: str) -> str: ...

    async def say(self, text: str) -> str: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------------- ioquake3
class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.replies: asyncio.Queue[bytes | Exception] = asyncio.Queue(maxsize=256)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # a flood of datagrams is not our reply
            self.replies.put_nowait(data)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable on a connected socket: nothing listens there.
        with contextlib.suppress(asyncio.QueueFull):
            self.replies.put_nowait(exc)


class Quake3Rcon:
    """ioquake3 / OpenArena rcon over UDP; one command at a time (replies carry no id)."""

    def __init__(self, host: str, port: int, password: str, timeout: float = 2.0) -> None:
        if not password or _CONTROL.search(password) or " " in password or '"' in password:
            # The server reads the password as one token: a blank or a quote would split it.
            raise ValueError(
                "an ioquake3 rcon password must be non-empty, without blanks, quotes or controls"
            )
        self.host, self.port = host, port
        self._password = password.encode("utf-8")
        self.timeout = timeout
        self._lock = asyncio.Lock()
        self._transport: asyncio.DatagramTransport | None = None
        self._protocol: _Datagrams | None = None

    async def tell(self, target: str, text: str) -> str:
        if not (target.isascii() and target.isdigit() and len(target) <= 2):
            raise RconProtocolError(f"not a client number: {target[:16]!r}")
        return await self.command(f"tell {int(target)} {quake3_text(text)}")

    async def say(self, text: str) -> str:
        return await self.command(f"say {quake3_text(text)}")

    async def command(self, command: str) -> str:
        """Send one command (already made safe) and return the server's printed output."""
        packet = _OOB + b"rcon " + self._password + b" " + command.encode("utf-8", "replace")
        if len(packet) > MAX_DATAGRAM:
            raise RconProtocolError(f"command of {len(packet)} bytes > {MAX_DATAGRAM}")
        async with self._lock:
            protocol = await self._open()
            while not protocol.replies.empty():  # late replies to a command that timed out
                protocol.replies.get_nowait()
            assert self._transport is not None
            self._transport.sendto(packet)
            first = await self._next(protocol, self.timeout)
            if first is None:
                raise RconTimeoutError(f"no reply from {self.host}:{self.port} in {self.timeout} s")
            parts = [first]
            while (more := await self._next(protocol, _MORE)) is not None:
                parts.append(more)
        text = "".join(parts)
        if text.startswith(("Bad rconpassword.", "No rconpassword set")):
            raise RconAuthError(text.strip())
        return text

    async def _next(self, protocol: _Datagrams, wait: float) -> str | None:
        try:
            got = await asyncio.wait_for(protocol.replies.get(), wait)
        except TimeoutError:
            return None
        if isinstance(got, Exception):
            self.close()  # re-opened by the next command
            raise RconUnreachableError(f"{self.host}:{self.port}: {got}") from got
        if not got.startswith(_OOB + _PRINT):
            raise RconProtocolError(f"unexpected reply {got[:32]!r}")
        return got[len(_OOB + _PRINT) :].decode("utf-8", "replace")

    async def _open(self) -> _Datagrams:
        if self._protocol is None or self._transport is None or self._transport.is_closing():
            loop = asyncio.get_running_loop()
            try:
                transport, protocol = await loop.create_datagram_endpoint(
                    _Datagrams, remote_addr=(self.host, self.port)
                )
            except OSError as e:
                raise RconUnreachableError(f"{self.host}:{self.port}: {e}") from e
            self._transport, self._protocol = transport, protocol
        return self._protocol

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._transport = self._protocol = None


# ---------------------------------------------------------------------------- Source
def encode_packet(request_id: int, kind: int, body: str) -> bytes:
    """One Source RCON packet."""
    payload = struct.pack("<ii", request_id, kind) + body.encode("utf-8") + b"\x00\x00"
    return struct.pack("<i", len(payload)) + payload


async def read_packet(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    """(id, type, body) of the next packet; ``RconProtocolError`` for a size out of bounds."""
    head = await reader.readexactly(4)
    (size,) = struct.unpack("<i", head)
    if not 10 <= size <= MAX_SOURCE_PACKET:
        raise RconProtocolError(f"packet size {size} out of bounds")
    data = await reader.readexactly(size)
    request_id, kind = struct.unpack("<ii", data[:8])
    body = data[8:].rstrip(b"\x00") if data.endswith(b"\x00\x00") else data[8:]
    return request_id, kind, body


class SourceRcon:
    """The Valve Source RCON protocol over one kept TCP connection."""

    def __init__(self, host: str, port: int, password: str, timeout: float = 2.0) -> None:
        if not password:
            raise ValueError("a Source rcon password must not be empty")
        self.host, self.port = host, port
        self._password = password
        self.timeout = timeout
        self._lock = asyncio.Lock()
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._next_id = 0

    async def tell(self, target: str, text: str) -> str:
        if not re.fullmatch(r"#\d{1,10}", target):
            raise RconProtocolError(f"not a #userid: {target[:16]!r}")
        return await self.command(f'sm_psay {target} "{source_text(text)}"')

    async def say(self, text: str) -> str:
        return await self.command(f"say {source_text(text)}")

    async def command(self, command: str) -> str:
        async with self._lock:
            try:
                return await asyncio.wait_for(self._command(command), self.timeout)
            except TimeoutError as e:
                self.close()
                raise RconTimeoutError(f"no reply from {self.host}:{self.port} in {self.timeout} s") from e
            except (OSError, asyncio.IncompleteReadError) as e:
                self.close()
                raise RconUnreachableError(f"{self.host}:{self.port}: {e}") from e
            except RconError:
                self.close()
                raise

    def _id(self) -> int:
        self._next_id = self._next_id % 0x7FFFFFF0 + 1  # ids stay positive: -1 means refused
        return self._next_id

    async def _command(self, command: str) -> str:
        reader, writer = await self._connect()
        cid, end = self._id(), self._id()
        writer.write(encode_packet(cid, SERVERDATA_EXECCOMMAND, command))
        writer.write(encode_packet(end, SERVERDATA_RESPONSE_VALUE, ""))
        await writer.drain()
        parts: list[bytes] = []
        while True:
            rid, kind, body = await read_packet(reader)
            if rid == end:
                return b"".join(parts).decode("utf-8", "replace")
            if rid == cid and kind == SERVERDATA_RESPONSE_VALUE:
                parts.append(body)
            # Anything else: the tail of an earlier exchange (the mirror's second packet).

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._stream is not None:
            return self._stream
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self._stream = (reader, writer)
        aid = self._id()
        writer.write(encode_packet(aid, SERVERDATA_AUTH, self._password))
        await writer.drain()
        while True:
            rid, kind, _ = await read_packet(reader)
            if kind == SERVERDATA_AUTH_RESPONSE:
                if rid == -1:
                    raise RconAuthError(f"{self.host}:{self.port} refused the rcon password")
                if rid == aid:
                    return reader, writer
            # The empty RESPONSE_VALUE the server sends before its AUTH_RESPONSE.

    def close(self) -> None:
        if self._stream is not None:
            self._stream[1].close()
        self._stream = None
