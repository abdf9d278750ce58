"""Connections to a server: one gRPC channel with the SDK's options, and the call metadata."""

from __future__ import annotations

import random
from typing import List, Optional, Sequence, Tuple

import grpc
import grpc.aio

#: The SDKs accept responses of up to 32 MiB (docs/protocol.md, limits).
MAX_RECEIVE = 32 << 20
#: The server refuses any message over 8 MiB.
MAX_SEND = 8 << 20

_OPTIONS: List[Tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_RECEIVE),
    ("grpc.max_send_message_length", MAX_SEND),
    # Reconnect quickly after a server restart; the worker has its own backoff on top.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def addresses(address: str) -> List[str]:
    """The servers of ``address``: one gRPC target, or a cluster's servers listed as
    "host1:port,host2:port" (in a random order)."""
    if not address or not address.strip():
        raise ValueError("aion: address is empty")
    if "," not in address:
        return [address.strip()]
    out = [a.strip() for a in address.split(",") if a.strip()]
    random.shuffle(out)
    return out


def channel(target: str, credentials: Optional[grpc.ChannelCredentials] = None,
            options: Sequence[Tuple[str, object]] = ()) -> grpc.aio.Channel:
    """An asyncio channel to one server; plain gRPC unless ``credentials`` are given (TLS)."""
    opts = list(_OPTIONS) + list(options)
    if credentials is not None:
        return grpc.aio.secure_channel(target, credentials, options=opts)
    return grpc.aio.insecure_channel(target, options=opts)


def metadata(token: Optional[str]) -> Optional[Tuple[Tuple[str, str], ...]]:
    """The call metadata: the bearer token when there is one."""
    if not token:
        return None
    return (("authorization", "Bearer " + token),)
