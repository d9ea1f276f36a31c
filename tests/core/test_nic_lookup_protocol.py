"""The NIC lookup service's wire format (pure functions): what is accepted, what is refused and how."""

from __future__ import annotations

import json

import pytest

from nri_pinner.edge.nic_lookup.netns import LinkDevice
from nri_pinner.edge.nic_lookup.protocol import (
    HEADER,
    MAX_REPLY,
    MAX_REQUEST,
    ProtocolError,
    ServiceError,
    check_netns_path,
    decode_reply,
    decode_request,
    encode_error,
    encode_links,
    encode_request,
    frame_length,
)


def payload(framed: bytes) -> bytes:
    assert frame_length(framed[:HEADER.size], MAX_REPLY) == len(framed) - HEADER.size
    return framed[HEADER.size:]


@pytest.mark.parametrize("path", ["/var/run/netns/cni-8a4e5b7c-1f2d-3e4f-5a6b-7c8d9e0f1a2b", "/run/netns/npt1",
                                  "/proc/4242/ns/net", "/var/run/netns/a_b.c:d@e+f-g"])
def test_runtime_netns_paths_are_accepted(path: str) -> None:
    assert check_netns_path(path) == path
    assert decode_request(payload(encode_request(path))) == path


@pytest.mark.parametrize("path", [
    "", "/etc/passwd", "/var/run/netns/", "/var/run/netns/..", "/var/run/netns/../../etc/shadow",
    "/var/run/netns/a/b", "/run/netns/.hidden", "/proc/self/ns/net", "/proc/1/ns/mnt", "/proc/0/ns/net",
    "/proc/1/task/1/ns/net", "var/run/netns/x", "/var/run/netns/x\n", "/var/run/netns/x\0y",
    "/var/run/netns/" + "x" * 300, 42, None, ["/run/netns/x"],
])
def test_anything_else_is_refused_with_the_reason(path: object) -> None:
    with pytest.raises(ProtocolError, match="netns"):
        check_netns_path(path)


def test_request_frames_are_bounded_and_versioned() -> None:
    framed = encode_request("/run/netns/x")
    assert framed[HEADER.size:] == b'{"v":1,"netns":"/run/netns/x"}'
    for header in (HEADER.pack(0), HEADER.pack(MAX_REQUEST + 1), HEADER.pack(1 << 31), b"\0\0"):
        with pytest.raises(ProtocolError):
            frame_length(header, MAX_REQUEST)
    for bad, match in ((b"\xff\xfe", "UTF-8 JSON"), (b"[1]", "JSON object"), (b'{"v": 2, "netns": "/run/netns/x"}',
                       "version '2'; this side speaks 1"), (b'{"netns": "/run/netns/x"}', "version 'None'"),
                       (b'{"v": 1, "netns": "/run/netns/x", "op": "rm"}', "unknown request field"),
                       (b"[" * 100000, "UTF-8 JSON"), (b'{"v": 1}', "netns must be a string")):
        with pytest.raises(ProtocolError, match=match):
            decode_request(bad)


def test_replies_carry_links_or_the_services_error() -> None:
    links = (LinkDevice("net1", "macvlan", "pci", "0000:3b:00.2", "ens1f0"),
             LinkDevice("eth0", "veth", note="veth: virtual link, no device"))
    assert decode_reply(payload(encode_links(links))) == links
    with pytest.raises(ServiceError, match="No such file"):
        decode_reply(payload(encode_error("[Errno 2] No such file or directory: '/run/netns/x'")))
    assert len(encode_error("x" * 10000)) < 2100  # an error text is cut, never over a frame


@pytest.mark.parametrize("links", [
    None, "eth0", [1], [{"kind": "veth"}], [{"name": "", "kind": "veth"}], [{"name": "eth0", "kind": 3}],
    [{"name": "eth0", "kind": "veth", "bus": 1}], [{"name": "x" * 65, "kind": "veth"}],
])
def test_malformed_replies_are_protocol_errors(links: object) -> None:
    with pytest.raises(ProtocolError):
        decode_reply(json.dumps({"v": 1, "links": links}).encode())


def test_a_reply_too_big_for_a_frame_is_refused_when_encoded() -> None:
    many = [LinkDevice(f"l{i}", "veth", note="n" * 500) for i in range(3000)]
    with pytest.raises(ProtocolError, match="over the"):
        encode_links(many)
