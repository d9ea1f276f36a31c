"""The NIC lookup service's wire format, as pure functions (the client and the server do the socket I/O).

One request and one reply per connection over a unix stream socket, each a frame: a 4-byte big-endian
length, then that many bytes of UTF-8 JSON::

    request  {"v": 1, "netns": "/var/run/netns/cni-…"}
    reply    {"v": 1, "links": [{"name": "net1", "kind": "macvlan", "bus": "pci", "dev": "0000:3b:00.2",
                                 "via": "ens1f0", "note": ""}, …]}
             {"v": 1, "error": "[Errno 2] No such file or directory: '/var/run/netns/cni-…'"}

A reply carries each link's parent device as netlink names it (`netns.LinkDevice`); the caller
places it on its own sysfs root (PCI function, NUMA node), so the service reads no sysfs. Only the
paths where runtimes put pod network namespaces are accepted: ``/var/run/netns/NAME``,
``/run/netns/NAME`` (containerd, CRI-O, ``ip netns``) and ``/proc/PID/ns/net``.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Sequence
from typing import Any

from .netns import LinkDevice

VERSION = 1
HEADER = struct.Struct(">I")
MAX_REQUEST = 4096
MAX_REPLY = 1 << 20
NETNS_DIRS = ("/var/run/netns/", "/run/netns/")
_PROC_NETNS = re.compile(r"/proc/[1-9][0-9]{0,9}/ns/net")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,254}")


class ProtocolError(ValueError):
    """A frame or message that breaks this format (the message says how)."""


class ServiceError(LookupError):
    """The service answered with an error (its text): the lookup itself failed there."""


def check_netns_path(path: object) -> str:
    """``path`` if it names a network namespace where runtimes put them; ProtocolError otherwise."""
    if not isinstance(path, str):
        raise ProtocolError(f"netns must be a string, not {type(path).__name__}")
    if _PROC_NETNS.fullmatch(path):
        return path
    for directory in NETNS_DIRS:
        if path.startswith(directory) and _NAME.fullmatch(path[len(directory):]):
            return path
    raise ProtocolError(f"netns {path[:300]!r} is not /var/run/netns/NAME, /run/netns/NAME or /proc/PID/ns/net")


def frame(message: dict[str, Any], limit: int) -> bytes:
    payload = json.dumps(message, separators=(",", ":")).encode()
    if len(payload) > limit:
        raise ProtocolError(f"message of {len(payload)} bytes over the {limit}-byte limit")
    return HEADER.pack(len(payload)) + payload


def frame_length(header: bytes, limit: int) -> int:
    """The payload length a frame header announces (ProtocolError when 0 or over ``limit``)."""
    if len(header) != HEADER.size:
        raise ProtocolError(f"frame header of {len(header)} bytes, expected {HEADER.size}")
    (length,) = HEADER.unpack(header)
    if not 0 < length <= limit:
        raise ProtocolError(f"frame of {length} bytes (1 to {limit} allowed)")
    return int(length)


def _message(payload: bytes) -> dict[str, Any]:
    try:
        message = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"not UTF-8 JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a JSON object, got {type(message).__name__}")
    if message.get("v") != VERSION:
        raise ProtocolError(f"protocol version {str(message.get('v'))[:20]!r}; this side speaks {VERSION}")
    return message


def encode_request(netns: str) -> bytes:
    return frame({"v": VERSION, "netns": check_netns_path(netns)}, MAX_REQUEST)


def decode_request(payload: bytes) -> str:
    """The netns path of a request payload (without its header), checked."""
    message = _message(payload)
    extra = sorted(set(message) - {"v", "netns"})
    if extra:
        raise ProtocolError(f"unknown request field(s) {', '.join(map(repr, extra))[:200]}")
    return check_netns_path(message.get("netns"))


def encode_links(links: Sequence[LinkDevice]) -> bytes:
    return frame({"v": VERSION, "links": [{"name": x.name, "kind": x.kind, "bus": x.bus, "dev": x.dev,
                                            "via": x.via, "note": x.note} for x in links]}, MAX_REPLY)


def encode_error(text: str) -> bytes:
    return frame({"v": VERSION, "error": text[:2000]}, MAX_REPLY)


def decode_reply(payload: bytes) -> tuple[LinkDevice, ...]:
    """The links of a reply payload; ServiceError when the service answered with an error."""
    message = _message(payload)
    if "error" in message:
        raise ServiceError(str(message["error"])[:2000])
    links = message.get("links")
    if not isinstance(links, list):
        raise ProtocolError("reply has neither links nor error")
    return tuple(_link(item) for item in links)


def _field(item: dict[str, Any], key: str, limit: int) -> str:
    value = item.get(key, "")
    if not isinstance(value, str) or len(value) > limit:
        raise ProtocolError(f"link field {key!r}: {str(value)[:80]!r} is not a string of at most {limit}")
    return value


def _link(item: object) -> LinkDevice:
    if not isinstance(item, dict):
        raise ProtocolError(f"link entry is {type(item).__name__}, not an object")
    name = _field(item, "name", 64)
    if not name:
        raise ProtocolError("link entry without a name")
    bus, dev = (None if item.get(key) is None else _field(item, key, 256) for key in ("bus", "dev"))
    return LinkDevice(name, _field(item, "kind", 64), bus, dev, _field(item, "via", 512), _field(item, "note", 512))
