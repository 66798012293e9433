"""The llhttp adapter against arbitrary bytes: it answers or closes, never fails, and goes on serving."""

from __future__ import annotations

import socket

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web_harness import TIMEOUT, Client, ServerThread

CHUNKS = st.sampled_from(
    [
        b"GET ", b"POST ", b"HEAD ", b"/api/v1/tiers", b"/", b"?", b"scope=", b"%", b"%FF", b" HTTP/1.1",
        b" HTTP/1.0", b" HTTP/2", b"\r\n", b"\n", b"Host: x", b"Content-Length: 5", b"Content-Length: -1",
        b"Transfer-Encoding: chunked", b"Connection: close", b"Expect: 100-continue", b": ", b"\x00", b"\xff",
        b"0\r\n\r\n", b"hello", b"X-Forwarded-For: 1.2.3.4", b"\r\n\r\n",
    ]
)  # fmt: skip
PAYLOADS = st.one_of(st.lists(CHUNKS, max_size=16).map(b"".join), st.binary(max_size=300))


def exchange(host: str, port: int, payload: bytes) -> bytes:
    with socket.create_connection((host, port), timeout=TIMEOUT) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


class TestArbitraryBytes:
    """Any byte sequence gets HTTP answers or nothing, and the server keeps answering."""

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(PAYLOADS)
    def test_bytes(self, server: ServerThread, client: Client, payload: bytes) -> None:
        data = exchange(client.host, client.port, payload)
        assert data == b"" or data.startswith(b"HTTP/1.1 "), data[:100]
        assert b"Traceback" not in data
        assert server.handle.app.internal_errors == 0
        assert client.get("/api/v1/tiers").status == 200
