"""The Source log receiver on real sockets: routing by sender, sv_logsecret, drops, settings."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from arenad.core.events import KillEvent, PlacementEvent, Reject, RejectReason
from arenad.daemon.config_sources import HlServer, HlUdpSettings, parse_server_address
from arenad.daemon.sources import hl_udp
from arenad.daemon.sources.hl_udp import (
    HlUdpSource,
    hl_udp_from_mapping,
    load_secret,
    load_secrets,
    open_hl_udp,
)
from arenad.daemon.types import Batch
from arenad.errors import ConfigError

STAMP = "10/20/2023 - 18:23:45"
ALICE = '"alice<2><STEAM_1:0:12345><CT>"'
BOB = '"bob<3><STEAM_1:1:54321><TERRORIST>"'
KILL = f'L {STAMP}: {ALICE} [1 2 3] killed {BOB} [4 5 6] with "ak47" (headshot)'.encode()
KILL_BACK = f'L {STAMP}: {BOB} [4 5 6] killed {ALICE} [1 2 3] with "awp"'.encode()
SUICIDE = f'L {STAMP}: {ALICE} [1 2 3] committed suicide with "world"'.encode()
PURCHASE = f'L {STAMP}: {ALICE} purchased "ak47"'.encode()
WAIT = 5.0  # seconds: a bound on every wait, never a pause


def r_packet(line: bytes) -> bytes:
    # As the engine sends it: header, type, the line with its newline, then a C string's NUL.
    return b"\xff\xff\xff\xffR" + line + b"\n\x00"


def s_packet(secret: str, line: bytes) -> bytes:
    return b"\xff\xff\xff\xffS" + secret.encode() + line + b"\n\x00"


@pytest.fixture
def sender() -> Iterator[socket.socket]:
    """A UDP socket on 127.0.0.1 with its own port (a game server's log sender)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        yield s


def port_of(s: socket.socket) -> int:
    port: int = s.getsockname()[1]
    return port


def settings_for(*servers: HlServer, **kwargs: Any) -> HlUdpSettings:
    return HlUdpSettings(listen="127.0.0.1:0", servers=servers, **kwargs)


def exchange(
    settings: HlUdpSettings, sender: socket.socket, packets: list[bytes], expect: int
) -> tuple[list[Batch], HlUdpSource]:
    """Send ``packets`` in order and take ``expect`` batches (each wait bounded).

    Loopback keeps one socket's datagrams in order, so once the batch of the last packet is
    taken every earlier packet has been handled, and the queue must then be empty.
    """

    async def run() -> tuple[list[Batch], HlUdpSource]:
        queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=100)
        transport, protocol = await open_hl_udp(settings, queue, Counter())
        try:
            addr = transport.get_extra_info("sockname")[:2]
            for p in packets:
                sender.sendto(p, addr)
            out = [await asyncio.wait_for(queue.get(), timeout=WAIT) for _ in range(expect)]
            assert queue.empty()
            return out, protocol
        finally:
            transport.close()

    return asyncio.run(run())


def only_item(batch: Batch) -> KillEvent | PlacementEvent | Reject:
    assert batch.source == "source_udp"
    assert len(batch.items) == 1
    return batch.items[0]


def kill_of(batch: Batch) -> KillEvent:
    item = only_item(batch)
    assert isinstance(item, KillEvent), item
    return item


def reject_of(batch: Batch) -> Reject:
    item = only_item(batch)
    assert isinstance(item, Reject), item
    return item


def reject_reason(batch: Batch) -> RejectReason:
    return reject_of(batch).reason


class TestListedServers:
    """R datagrams from a listed server become kill events of that server, by Steam ID."""

    def test_kills_carry_the_server_id_and_steam_identities(self, sender: socket.socket) -> None:
        settings = settings_for(HlServer(name="cs-eu-1", address="127.0.0.1"))
        out, _ = exchange(settings, sender, [r_packet(KILL), r_packet(KILL_BACK)], expect=2)
        first, second = (kill_of(b) for b in out)
        assert (first.attacker, first.victim, first.weapon) == (
            "steam:[U:1:24690]",
            "steam:[U:1:108643]",
            "ak47",
        )
        assert (second.attacker, second.victim) == ("steam:[U:1:108643]", "steam:[U:1:24690]")
        assert first.server == second.server == "cs-eu-1"
        assert [b.server for b in out] == ["cs-eu-1", "cs-eu-1"]
        # Stable ids, so a line delivered twice is refused as a duplicate by the engine task.
        assert first.id is not None
        assert first.id != second.id

    def test_lines_without_kills_are_counted_not_queued(self, sender: socket.socket) -> None:
        settings = settings_for(HlServer(name="cs", address="127.0.0.1"))
        packets = [r_packet(PURCHASE), r_packet(SUICIDE), r_packet(KILL)]
        out, protocol = exchange(settings, sender, packets, expect=1)
        kill_of(out[0])
        assert protocol.nonkills == Counter({"suicide": 1})
        assert protocol.parsers["cs"].counts["lines"] == 3

    def test_host_port_entry_wins_over_a_host_entry(self, sender: socket.socket) -> None:
        exact = HlServer(name="exact", address=f"127.0.0.1:{port_of(sender)}")
        settings = settings_for(HlServer(name="any-port", address="127.0.0.1"), exact)
        out, _ = exchange(settings, sender, [r_packet(KILL)], expect=1)
        assert out[0].server == "exact"

    def test_host_port_entry_refuses_another_port(self, sender: socket.socket) -> None:
        other = port_of(sender) % 65535 + 1
        settings = settings_for(HlServer(name="cs", address=f"127.0.0.1:{other}"))
        out, _ = exchange(settings, sender, [r_packet(KILL)], expect=1)
        assert reject_reason(out[0]) is RejectReason.UNAUTHORISED

    def test_ipv4_mapped_senders_match_ipv4_entries(self) -> None:
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        source = HlUdpSource(settings_for(HlServer(name="cs", address="127.0.0.1")), queue, Counter())
        source.datagram_received(r_packet(KILL), ("::ffff:127.0.0.1", 27015, 0, 0))
        assert queue.get_nowait().server == "cs"


class TestSecrets:
    """With sv_logsecret configured, only S datagrams carrying exactly that secret are taken."""

    def test_s_datagram_with_the_secret_is_accepted(
        self, sender: socket.socket, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("CS_LOGSECRET", "74656")
        settings = settings_for(HlServer(name="cs", address="127.0.0.1", secret_env="CS_LOGSECRET"))
        out, _ = exchange(settings, sender, [s_packet("74656", KILL)], expect=1)
        assert kill_of(out[0]).server == "cs"

    def test_wrong_secret_and_r_datagrams_are_unauthorised(
        self, sender: socket.socket, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("CS_LOGSECRET", "74656")
        settings = settings_for(HlServer(name="cs", address="127.0.0.1", secret_env="CS_LOGSECRET"))
        packets = [s_packet("74657", KILL), s_packet("7465", KILL), s_packet("746560", KILL), r_packet(KILL)]
        out, _ = exchange(settings, sender, packets, expect=4)
        assert [reject_reason(b) for b in out] == [RejectReason.UNAUTHORISED] * 4
        details = " ".join(str(b.items[0]) for b in out)
        assert "74656" not in details  # a refusal never echoes the secret

    def test_s_datagram_where_no_secret_is_configured_is_unauthorised(self, sender: socket.socket) -> None:
        out, _ = exchange(
            settings_for(HlServer(name="cs", address="127.0.0.1")), sender, [s_packet("1", KILL)], expect=1
        )
        assert reject_reason(out[0]) is RejectReason.UNAUTHORISED

    def test_secret_from_a_file(self, sender: socket.socket, tmp_path: Path) -> None:
        path = tmp_path / "secret"
        path.write_text("s3cret\n", encoding="utf-8")
        settings = settings_for(HlServer(name="cs", address="127.0.0.1", secret_file=str(path)))
        out, _ = exchange(settings, sender, [s_packet("s3cret", KILL)], expect=1)
        kill_of(out[0])


class TestRefusals:
    """Unlisted senders and non-log datagrams are refused with a reason, never dropped silently."""

    def test_unlisted_sender_is_unauthorised(self, sender: socket.socket) -> None:
        settings = settings_for(HlServer(name="cs", address="127.0.0.2"))
        out, _ = exchange(settings, sender, [r_packet(KILL)], expect=1)
        assert reject_reason(out[0]) is RejectReason.UNAUTHORISED
        assert f"127.0.0.1:{port_of(sender)}" in reject_of(out[0]).detail
        assert out[0].server is None

    def test_garbage_is_malformed(self, sender: socket.socket) -> None:
        settings = settings_for(HlServer(name="cs", address="127.0.0.1"))
        packets = [
            b"hello",
            b"\xff\xff\xff\xffX" + KILL,
            b"\xff\xff\xff\xffR\n\x00",
            r_packet(b"not a log line"),
        ]
        out, _ = exchange(settings, sender, packets, expect=4)
        assert [reject_reason(b) for b in out] == [RejectReason.MALFORMED] * 4

    def test_accept_unknown_parses_unlisted_senders_as_host_port(self, sender: socket.socket) -> None:
        settings = HlUdpSettings(listen="127.0.0.1:0", accept_unknown=True)
        out, protocol = exchange(settings, sender, [r_packet(KILL), r_packet(KILL_BACK)], expect=2)
        server = f"127.0.0.1:{port_of(sender)}"
        assert [kill_of(b).server for b in out] == [server, server]
        assert list(protocol.parsers) == [server]  # one parser per sender, reused

    def test_unlisted_senders_are_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(hl_udp, "MAX_UNKNOWN_SENDERS", 2)
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        source = HlUdpSource(HlUdpSettings(accept_unknown=True), queue, Counter())
        for port in (1, 2, 3, 1):
            source.datagram_received(r_packet(KILL), ("10.0.0.9", port))
        items = [queue.get_nowait().items[0] for _ in range(4)]
        assert [type(i) for i in items] == [KillEvent, KillEvent, Reject, KillEvent]
        assert len(source.parsers) == 2

    def test_parser_failure_is_a_counted_reject(self, monkeypatch: pytest.MonkeyPatch) -> None:
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        source = HlUdpSource(settings_for(HlServer(name="cs", address="127.0.0.1")), queue, Counter())

        def broken(line: bytes, received_at: float) -> list[Any]:
            raise RuntimeError("bug")

        monkeypatch.setattr(source.parsers["cs"], "feed", broken)
        source.datagram_received(r_packet(KILL), ("127.0.0.1", 27015))
        assert reject_reason(queue.get_nowait()) is RejectReason.MALFORMED
        assert source.parser_errors == 1


class TestOverload:
    """A full engine queue drops the datagram's items and counts every one under source_udp."""

    def test_full_queue_counts_drops(self) -> None:
        queue: asyncio.Queue[Batch] = asyncio.Queue(maxsize=1)
        dropped: Counter[str] = Counter()
        source = HlUdpSource(settings_for(HlServer(name="cs", address="127.0.0.1")), queue, dropped)
        for packet in (r_packet(KILL), r_packet(KILL_BACK), b"garbage", r_packet(PURCHASE)):
            source.datagram_received(packet, ("127.0.0.1", 27015))
        assert queue.qsize() == 1
        assert dropped == Counter({"source_udp": 2})  # a kill and a reject; the purchase was never queued


class TestSettings:
    """[source_udp] from TOML: every bad key is named; secrets only from the environment or a file."""

    def test_a_valid_table(self) -> None:
        settings, problems = hl_udp_from_mapping(
            {
                "listen": "127.0.0.1:27501",
                "servers": [
                    {"name": "cs-1", "address": "10.0.0.5:27015", "secret_env": "CS1_SECRET"},
                    {"name": "tf-1", "address": "[2001:db8::7]:27015"},
                    {"name": "tf-2", "address": "2001:db8::8"},
                ],
                "feed_options": {"clock": "received", "bots": "exclude"},
            }
        )
        assert problems == []
        assert settings.enabled
        assert [s.name for s in settings.servers] == ["cs-1", "tf-1", "tf-2"]
        assert settings.parser_options("cs-1") == {
            "server": "cs-1",
            "ids": True,
            "clock": "received",
            "bots": "exclude",
        }

    def test_off_by_default(self) -> None:
        settings, problems = hl_udp_from_mapping({})
        assert problems == []
        assert not settings.enabled

    @pytest.mark.parametrize(
        ("table", "key"),
        [
            ({"listen": "nowhere", "accept_unknown": True}, "source_udp.listen"),
            ({"listen": 27501, "accept_unknown": True}, "source_udp.listen"),
            ({"accept_unknown": "yes"}, "source_udp.accept_unknown"),
            ({"port": 1}, "source_udp.port"),
            ({"servers": {"name": "x"}}, "source_udp.servers"),
            ({"listen": "127.0.0.1:27501"}, "source_udp.servers"),
            ({"servers": ["cs"]}, "source_udp.servers[0]"),
            (
                {"servers": [{"name": "cs", "address": "gameserver.example:27015"}]},
                "source_udp.servers[0].address",
            ),
            ({"servers": [{"name": "cs", "address": "10.0.0.5:0"}]}, "source_udp.servers[0].address"),
            ({"servers": [{"name": "", "address": "10.0.0.5"}]}, "source_udp.servers[0].name"),
            ({"servers": [{"name": "x" * 129, "address": "10.0.0.5"}]}, "source_udp.servers[0].name"),
            ({"servers": [{"address": "10.0.0.5"}]}, "source_udp.servers[0].name"),
            (
                {"servers": [{"name": "cs", "address": "10.0.0.5", "secret_env": 7}]},
                "source_udp.servers[0].secret_env",
            ),
            ({"servers": [{"name": "cs", "address": "10.0.0.5", "rcon": "x"}]}, "source_udp.servers[0].rcon"),
            ({"feed_options": {"server": "x"}}, "source_udp.feed_options.server"),
            ({"feed_options": {"clock": "sundial"}}, "source_udp.feed_options.clock"),
            ({"feed_options": {"colour": 1}}, "source_udp.feed_options.colour"),
            ({"feed_options": "fast"}, "source_udp.feed_options"),
        ],
    )
    def test_problems_name_the_key(self, table: Mapping[str, Any], key: str) -> None:
        _, problems = hl_udp_from_mapping(table)
        assert key in [p.key for p in problems], problems

    def test_duplicates_name_the_later_entry(self) -> None:
        _, problems = hl_udp_from_mapping(
            {
                "servers": [
                    {"name": "cs", "address": "10.0.0.5"},
                    {"name": "cs", "address": "10.0.0.6"},
                    {"name": "cs-3", "address": "::ffff:10.0.0.5"},
                ]
            }
        )
        assert [(p.key, p.message) for p in problems] == [
            ("source_udp.servers[1].name", "same name as servers[0]"),
            ("source_udp.servers[2].address", "same address as servers[0]"),
        ]

    def test_a_secret_in_the_config_is_refused_and_not_echoed(self) -> None:
        _, problems = hl_udp_from_mapping(
            {"servers": [{"name": "cs", "address": "10.0.0.5", "secret": "74656"}]}
        )
        assert [p.key for p in problems] == ["source_udp.servers[0].secret"]
        assert "74656" not in str(problems[0])

    def test_server_addresses(self) -> None:
        assert parse_server_address("10.0.0.5") == ("10.0.0.5", None)
        assert parse_server_address("10.0.0.5:27015") == ("10.0.0.5", 27015)
        assert parse_server_address("2001:DB8::7") == ("2001:db8::7", None)
        assert parse_server_address("[2001:db8::7]:27015") == ("2001:db8::7", 27015)
        assert parse_server_address("::ffff:10.0.0.5") == ("10.0.0.5", None)


class TestLoadSecret:
    """A named secret that cannot be had is a ConfigError naming its key, before anything binds."""

    def test_env_and_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("CS_LOGSECRET", "abc")
        path = tmp_path / "secret"
        path.write_text("from-file\r\nsecond line\n", encoding="utf-8")
        assert load_secret(HlServer(name="a", address="10.0.0.5", secret_env="CS_LOGSECRET")) == "abc"
        assert load_secret(HlServer(name="b", address="10.0.0.5", secret_file=str(path))) == "from-file"
        assert load_secret(HlServer(name="c", address="10.0.0.5")) is None

    def test_every_missing_secret_is_named(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("ARENAD_TEST_NO_SUCH_VAR", raising=False)
        empty = tmp_path / "empty"
        empty.write_text("\n", encoding="utf-8")
        settings = HlUdpSettings(
            servers=(
                HlServer(name="a", address="10.0.0.5", secret_env="ARENAD_TEST_NO_SUCH_VAR"),
                HlServer(name="b", address="10.0.0.6", secret_file=str(tmp_path / "missing")),
                HlServer(name="c", address="10.0.0.7", secret_file=str(empty)),
                HlServer(name="d", address="10.0.0.8"),
            )
        )
        with pytest.raises(ConfigError) as info:
            load_secrets(settings)
        assert [p.key for p in info.value.problems] == [
            "source_udp.servers[0].secret_env",
            "source_udp.servers[1].secret_file",
            "source_udp.servers[2].secret_file",
        ]

    def test_open_fails_before_binding(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("ARENAD_TEST_NO_SUCH_VAR", raising=False)
        settings = settings_for(HlServer(name="a", address="127.0.0.1", secret_env="ARENAD_TEST_NO_SUCH_VAR"))

        async def run() -> None:
            await open_hl_udp(settings, asyncio.Queue(), Counter())

        with pytest.raises(ConfigError, match=r"source_udp\.servers\[0\]\.secret_env"):
            asyncio.run(run())
