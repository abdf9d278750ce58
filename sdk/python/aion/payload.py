"""Payloads: JSON by convention (docs/protocol.md, payloads).

:func:`encode` turns a Python value into the bytes the server stores; :func:`decode`
turns bytes back into a value, optionally of a given type. ``bytes`` are opaque: they
are sent as they are and never parsed. Dataclasses are encoded as JSON objects and
decoded from them, recursively, so a handler can take and return typed values::

    @dataclass
    class Order:
        id: str
        amount: int

    decode(b'{"id": "42", "amount": 12}', Order)  # Order(id='42', amount=12)
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from typing import Any, Optional, TypeVar, Union

T = TypeVar("T")


class PayloadError(ValueError):
    """A payload did not decode into the type asked for, or a value did not encode."""


def _default(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
    if isinstance(o, enum.Enum):
        return o.value
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"{type(o).__name__} is not JSON encodable")


def encode(value: Any) -> bytes:
    """Encodes ``value`` as a JSON payload; ``bytes`` (and ``bytearray``) pass through unchanged.

    Raises :class:`PayloadError` when the value is not JSON-encodable.
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    try:
        return json.dumps(value, default=_default, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise PayloadError(f"encode {type(value).__name__} as JSON: {e}") from e


def decode(data: bytes, into: Any = None) -> Any:
    """Decodes a JSON payload, into the type ``into`` when given.

    Empty bytes decode as ``None`` (or the type's default, for a dataclass whose fields all
    have defaults). With ``into=bytes`` the bytes are returned as they are. Supported
    types: the JSON types (``dict``, ``list``, ``str``, ``int``, ``float``, ``bool``,
    ``None``), dataclasses, ``Optional``/``Union``, ``list[T]``, ``dict[str, T]``,
    ``tuple``, enums and ``Any``. Raises :class:`PayloadError` when it does not fit.
    """
    if into is bytes:
        return bytes(data)
    if not data:
        raw: Any = None
    else:
        try:
            raw = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise PayloadError(f"not JSON: {e}") from e
    if into is None or into is Any:
        return raw
    if raw is None and dataclasses.is_dataclass(into):
        raw = {}
    return convert(raw, into)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp)


def convert(value: Any, tp: Any, path: str = "$") -> Any:
    """Converts a decoded JSON value to the type ``tp`` (see :func:`decode`); ``path`` names
    where in the payload the value is, for the error message."""
    if tp is Any or tp is None and value is None:
        return value
    if tp is type(None):
        if value is not None:
            raise PayloadError(f"{path}: want null, got {type(value).__name__}")
        return None
    origin = typing.get_origin(tp)
    if origin is Union or (hasattr(types, "UnionType") and isinstance(tp, types.UnionType)):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return convert(value, arg, path)
            except PayloadError as e:
                errors.append(str(e))
        raise PayloadError("; ".join(errors) or f"{path}: no type of {tp} fits")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise PayloadError(f"{path}: {value!r} is not one of {typing.get_args(tp)}")
        return value
    if origin in (list, typing.List, set, frozenset) or tp in (list, set, frozenset):
        if not isinstance(value, list):
            raise PayloadError(f"{path}: want a list, got {type(value).__name__}")
        args = typing.get_args(tp)
        items = [convert(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)] if args else list(value)
        kind = origin or tp
        return items if kind in (list, typing.List) else kind(items)
    if origin is tuple or tp is tuple:
        if not isinstance(value, list):
            raise PayloadError(f"{path}: want a list, got {type(value).__name__}")
        args = typing.get_args(tp)
        if not args:
            return tuple(value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(convert(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise PayloadError(f"{path}: want {len(args)} items, got {len(value)}")
        return tuple(convert(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin in (dict, typing.Dict) or tp is dict:
        if not isinstance(value, dict):
            raise PayloadError(f"{path}: want an object, got {type(value).__name__}")
        args = typing.get_args(tp)
        if not args:
            return dict(value)
        return {k: convert(v, args[1], f"{path}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise PayloadError(f"{path}: want an object for {tp.__name__}, got {type(value).__name__}")
        try:
            hints = typing.get_type_hints(tp)
        except (NameError, TypeError):  # annotations that do not resolve: take the values as decoded
            hints = {}
        kwargs = {}
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            if f.name in value:
                kwargs[f.name] = convert(value[f.name], hints.get(f.name, Any), f"{path}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise PayloadError(f"{path}: field {f.name!r} of {tp.__name__} is missing")
        return tp(**kwargs)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError as e:
            raise PayloadError(f"{path}: {e}") from e
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PayloadError(f"{path}: want a number, got {type(value).__name__}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PayloadError(f"{path}: want an integer, got {type(value).__name__}")
        return value
    if tp in (str, bool):
        if type(value) is not tp:
            raise PayloadError(f"{path}: want {tp.__name__}, got {type(value).__name__}")
        return value
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        raise PayloadError(f"{path}: want {_type_name(tp)}, got {type(value).__name__}")
    # TypedDict, NewType and other typing constructs: accepted as decoded.
    return value


def encode_optional(value: Any) -> Optional[bytes]:
    """Like :func:`encode`, but ``None`` stays ``None`` (for optional details)."""
    return None if value is None else encode(value)
