"""A variant's host draws (``tracer.random_draws.DrawProgram``) as JSON, and back.

The disk cache is a trust boundary: what is stored is data - each draw's method by name,
where its generator is found (a path, as implicit inputs store theirs), its arguments as
numbers, strings, dtype names and dim expressions - never a pickled callable. Reading it
back, every op must pass ``random_draws.check_op``: a method outside the allowlist, a
generator found anywhere else, an argument of any other kind, and the entry is refused.

>>> import numpy as np
>>> from tracejit.tracer.random_draws import DrawOp, DrawProgram
>>> from tracejit.tracer.dims import parse_dim
>>> program = DrawProgram([DrawOp("draw", ("legacy",), "RandomState", "rand",
...                                (parse_dim("s0"), 3), ())])
>>> draws_from_json(draws_to_json(program, None), None) == program
True
"""

from __future__ import annotations

import math

import numpy as np

from tracejit.tracer.dims import DimExpr, parse_dim
from tracejit.tracer.random_draws import ArgumentNumber, DrawOp, DrawProgram


def draws_to_json(program, fn):
    from .serialize import path_to_json  # serialize imports this module

    if program is None:
        return None
    ops = []
    for op in program.ops:
        if op.rng and op.rng[0] == "path":
            rng = ["path", path_to_json(op.rng[1], fn)]
        else:
            rng = list(op.rng)
        ops.append({"kind": op.kind, "rng": rng, "rng_type": op.rng_type, "name": op.name,
                    "args": [_value_to_json(arg) for arg in op.args],
                    "kwargs": [[key, _value_to_json(value)] for key, value in op.kwargs],
                    "location": op.location})
    return ops


def _value_to_json(value):
    from .serialize import NotSerializable

    if isinstance(value, DimExpr):
        return {"dim": str(value)}
    if isinstance(value, ArgumentNumber):
        return {"argument": value.leaf}
    if isinstance(value, np.dtype):
        return {"dtype": value.name}
    if isinstance(value, tuple):
        return {"tuple": [_value_to_json(item) for item in value]}
    if isinstance(value, list):
        return [_value_to_json(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise NotSerializable(f"a random draw with the parameter {value!r}")
    return value


def draws_from_json(data, fn):
    from .serialize import InvalidEntry, _check, path_from_json

    if data is None:
        return None
    _check(isinstance(data, list), "malformed random draws")
    ops = []
    for item in data:
        _check(isinstance(item, dict) and isinstance(item.get("rng"), list)
               and isinstance(item.get("args"), list) and isinstance(item.get("kwargs"), list),
               "a malformed random draw")
        rng = item["rng"]
        if rng[:1] == ["path"] and len(rng) == 2:
            rng = ("path", path_from_json(rng[1], fn))
        else:
            rng = tuple(rng)
        kwargs = []
        for pair in item["kwargs"]:
            _check(isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str),
                   "a malformed random draw argument")
            kwargs.append((pair[0], _value_from_json(pair[1])))
        ops.append(DrawOp(item.get("kind"), rng, item.get("rng_type"), item.get("name"),
                          tuple(_value_from_json(arg) for arg in item["args"]), tuple(kwargs),
                          str(item.get("location", ""))))
    try:
        return DrawProgram(ops)  # every op checked against the allowlist
    except (ValueError, TypeError) as error:
        raise InvalidEntry(f"random draws: {error}") from None


_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64")


def _value_from_json(value):
    from .serialize import _check, dtype_of

    if isinstance(value, dict):
        _check(len(value) == 1, "a malformed random draw argument")
        (kind, inner), = value.items()
        if kind == "dim":
            _check(isinstance(inner, str), "a malformed drawn size")
            return parse_dim(inner)
        if kind == "argument":  # a seed argument: DrawProgram allows it only there
            _check(type(inner) is int and inner >= 0, "a malformed seed argument")
            return ArgumentNumber(inner)
        if kind == "dtype":
            _check(inner in _DTYPES, f"a drawn dtype {inner!r}")
            return dtype_of(np.dtype(inner).str)
        _check(kind == "tuple" and isinstance(inner, list), "a malformed random draw argument")
        return tuple(_value_from_json(item) for item in inner)
    if isinstance(value, list):
        return [_value_from_json(item) for item in value]
    return value
