"""Round 23's generators: counted loops, dtype mixes, hostile shapes and hostile values.

Beside ``fuzz.py`` (whose programs are drawn statement by statement over fixed arguments
``x, w, v, ...``), each family here writes a whole small model function together with its
own argument maker, so the arguments can be what the family is about: an int trip count,
mixed dtypes and scalar kinds, shapes 0/1/primes, transposed and reversed views, NaN and
denormals::

    program = draw(seed)               # a Drawn: source, family, make(call) -> arguments
    print(program.source)
    problem = check(program)           # None, or (kind, text) as fuzz.run_one says

Families (``FAMILIES``, one per ``draw``):

* ``counted_loop``: ``for i in range(n)`` where ``n`` is an int argument, ``len(x)`` or an
  offset of either, with a data-dependent ``if`` in the body, an early ``break`` or
  ``return`` on a computed test, periodic appends (``i % k == 0 or i == n - 1``), buffers
  written through slices (``buf[i, :k] = ...``, ``buf[:, i] += ...``) and a count of the
  branch taken, returned (so a different branch shows as a different int, exactly);
* ``dtype_mix``: arithmetic, comparisons, ``where``, ``clip``, reductions with ``dtype=``,
  ``out=``, ``where=``, ``keepdims``, and cumulative ops over bool/uint8/int16/int32/int64/
  float16/float32/float64 arrays, Python ints and floats, NumPy scalars and 0-d arrays;
* ``hostile_values``: NaN, infinities, -0.0 and denormals through max/min/argmax/sort/
  comparisons/sign/floor_divide/mod and their NaN-aware and ``fmax`` forms.

Every family's calls alternate shapes (0, 1, primes, broadcasting (1,) and (n, 1)) and
layouts (transposed, ``[::2]``, reversed) and draw the data so both sides of each ``if``
are taken. Run offline::

    nice -n 10 .venv/bin/python tests/differential/fuzz23.py --minutes 10 --seed 1

``test_fuzz_findings23.py`` runs a bounded, seeded sample in CI.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import warnings
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import fuzz  # noqa: E402 - beside this file, not a package

PRIMES = (0, 1, 2, 3, 5, 7, 11, 13)
# narrow dtypes and float16 are refused as arguments (eager, with a reason): drawn seldom
DTYPES = ("bool", "int32", "int64", "float32", "float64") * 4 + ("uint8", "int16", "float16")
SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 0.0, 5e-324, 1e-310, -1e-310, 1e300)


@dataclass
class Drawn:
    family: str
    source: str
    make: object  # make(call) -> tuple of arguments (fresh on every call)
    calls: int
    float32: bool = False


# --- arguments ---------------------------------------------------------------------------
def layout(array, how):
    """``array``'s values in layout ``how``: C, F (a transpose's), rev (negative strides),
    every-other (a ``[::2]`` view of a twice-longer array)."""
    if array.ndim == 0 or how == "C":
        return array
    if how == "F":
        return np.asfortranarray(array)
    if how == "rev":
        return np.flip(np.ascontiguousarray(np.flip(array)))
    wide = np.zeros((2 * array.shape[0],) + array.shape[1:], array.dtype)
    view = wide[::2]
    view[...] = array
    return view


def data(rng, shape, dtype, specials=0.0):
    """Values of ``dtype`` around 0 (both signs, some exact zeros), ``specials`` of the
    float elements replaced by NaN/Inf/-0.0/denormals."""
    values = rng.standard_normal(shape) * 2.0
    values[rng.random(shape) < 0.1] = 0.0
    if np.dtype(dtype).kind == "f" and specials and values.size:
        mask = rng.random(shape) < specials
        values[mask] = rng.choice(np.array(SPECIALS), size=int(mask.sum()))
    with np.errstate(all="ignore"):
        if dtype == "bool":
            return np.asarray(values > 0)
        if np.dtype(dtype).kind in "iu":
            values = np.nan_to_num(values, nan=0.0, posinf=9.0, neginf=-9.0)
            values = np.round(values * 3)
            if np.dtype(dtype).kind == "u":
                values = np.abs(values)
        return np.asarray(values.astype(dtype))


def scalar(rng, kind, value):
    return {"int": int(value), "float": float(value), "f32": np.float32(value),
            "i64": np.int64(int(value)), "zerod": np.asarray(float(value)),
            "zerod_i": np.asarray(int(value)), "u8": np.uint8(abs(int(value)) % 256),
            "bool": bool(value > 0)}[kind]


# --- (a) counted loops -----------------------------------------------------------------------
def counted_loop(rng):
    dtype = rng.choice(["float64", "float32", "float64"])
    bound_kind = rng.choice(["n", "len", "n-1", "1..n+1", "len-1", "n-step"])
    uses_n = bound_kind in ("n", "n-1", "1..n+1", "n-step")
    k = int(rng.choice([1, 2, 3]))
    period = int(rng.choice([1, 2, 3, 5, 10]))
    bound = {"n": "n", "len": "len(x)", "n-1": "n - 1", "1..n+1": "1, n + 1",
             "len-1": "len(x) - 1", "n-step": "0, n, 2"}[bound_kind]
    last = {"n": "n - 1", "len": "len(x) - 1", "n-1": "n - 2", "1..n+1": "n",
            "len-1": "len(x) - 2", "n-step": "n - 1"}[bound_kind]
    rows = "n + 1" if uses_n else "len(x)"
    lines = ["h = np.zeros(x.shape[1], x.dtype)", "hits = 0", "costs = []",
             f"buf = np.zeros(({rows}, x.shape[1]), x.dtype)",
             f"col = np.zeros((x.shape[1], {rows}), x.dtype)",
             f"for i in range({bound}):"]
    read = rng.choice(["x[i % len(x)]", "x[i % x.shape[0]]", "x[min(i, len(x) - 1)]",
                       "x[(i * 3) % len(x)]"])
    body = [f"    row = {read}", "    h = np.tanh(h * 0.5 + row * 0.7)"]
    test = rng.choice(["h.sum() > 0", "h[0] > row[0]", "np.max(h) > 0.5",
                       "(h > 0).sum() * 2 > h.size", "float(h.mean()) < 0",
                       "np.abs(h).max() >= 0.3"])
    kinds = rng.choice([("if",), ("if", "append"), ("if", "write"), ("break",),
                        ("return",), ("append", "write"), ("if", "break", "append"),
                        ("if", "write", "return"), ("colwrite",), ("if", "colwrite")])
    for part in kinds:
        if part == "if":
            body += [f"    if {test}:", "        h = h * 0.9", "        hits += 1",
                     "    else:", "        h = h - 0.1"]
        elif part == "append":
            cond = rng.choice([f"i % {period} == 0 or i == {last}",
                               f"i == {last} or i % {period} == 0",
                               f"i % {period} == 0", f"i == {last}"])
            value = rng.choice(["float(np.sum(h ** 2))", "h.copy()", "float(h[0])"])
            body += [f"    if {cond}:", f"        costs.append({value})"]
        elif part == "write":
            body += [rng.choice([f"    buf[i, :{k}] = h[:{k}]", "    buf[i] = h",
                                 f"    buf[i, {k}:] += h[{k}:]", "    buf[i + 1] = buf[i] + h",
                                 f"    buf[i, ::{k}] = h[::{k}] * 2"])]
        elif part == "colwrite":
            body += [rng.choice(["    col[:, i] += h", f"    col[:{k}, i] = h[:{k}]",
                                 "    col[:, i + 1] = col[:, i] * 0.5 + h"])]
        elif part == "break":
            stop = rng.choice(["np.abs(h).max() > 0.8", "hits > 2", "h.sum() < -1.5",
                               "i > 3 and h[0] > 0"])
            body += [f"    if {stop}:", "        break"]
        elif part == "return":
            stop = rng.choice(["np.abs(h).max() > 0.9", "h.sum() < -2.0", "hits >= 3"])
            body += [f"    if {stop}:", "        return h, hits, i, buf, costs"]
    lines += body
    lines.append("return h, hits, buf, col, costs")
    params = "x, n" if uses_n else "x"
    source = f"def program({params}):\n" + "".join(f"    {line}\n" for line in lines)
    shapes = [(int(rng.choice(PRIMES)), int(rng.choice((1, 2, 3, 5, 7)))) for _ in range(3)]
    counts = [int(rng.integers(0, 14)) for _ in range(4)] + [0, 1, 2, 3]
    layouts = ["C", "F", "rev", "every_other"]
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        rows_, cols = shapes[call % len(shapes)] if call >= 3 else shapes[0]
        if not uses_n:
            rows_ = max(rows_, 1) if "len-1" != bound_kind else rows_
        x = layout(data(local, (max(rows_, 1), cols), dtype,
                        specials=0.05 if call % 4 == 3 else 0.0), layouts[call % 4])
        if uses_n:
            return x, counts[call % len(counts)]
        return (x,)

    return Drawn("counted_loop", source, make, calls=10, float32=dtype == "float32")


def loop_forms(rng):
    """Loops ``counted_loop`` does not write: the count as np.int64, a 0-d array or a
    negative int, ``reversed(range(n))``, ``range(n - 1, -1, -1)``, ``while i < n``,
    ``enumerate(x)``, triangular inner loops over ``range(i)``, int32 and bool buffers
    written per trip, Python float totals, early returns of a different structure."""
    dtype = rng.choice(["float64", "float32"])
    header = rng.choice(["for i in range(n):", "for i in reversed(range(n)):",
                         "for i in range(n - 1, -1, -1):", "for i in range(2, n):",
                         "for i, row in enumerate(x[:n]):", "for i in range(min(n, len(x))):",
                         "while i < n:", "for i in range(n):\n    for j in range(i):"])
    nested = "for j" in header
    lines = ["h = np.zeros(x.shape[1], x.dtype)", "i = 0", "hits = 0", "total = 0.0",
             "ints = np.zeros(max(n, 0) + 1, np.int32)",
             "flags = np.zeros((max(n, 0) + 1, x.shape[1]), bool)", "costs = []"]
    lines += header.split("\n")
    pad = "        " if nested else "    "
    body = []
    if "row" not in header:
        body.append(f"row = x[{rng.choice(['i % len(x)', '(n - 1 - i) % len(x)'])}]")
    body.append(rng.choice(["h = np.tanh(h * 0.5 + row)", "h = h * 0.9 + row * 0.1",
                            "h = np.maximum(h, row) - 0.05"]))
    test = rng.choice(["h.sum() > 0", "row[0] > h[0]", "(h > 0).any()", "h.max() < 0.2"])
    for part in rng.choice([("if", "ints"), ("flags", "total"), ("if", "total", "append"),
                            ("ints", "return"), ("if", "flags", "break"), ("total", "return"),
                            ("append", "ints", "flags")]):
        if part == "if":
            body += [f"if {test}:", "    hits += 1", "    h = -h"]
        elif part == "ints":
            body += [rng.choice(["ints[i] = hits", "ints[i] += int(h.sum() > 0)",
                                 "ints[i + 1] = ints[i] + (h[0] > 0)",
                                 "ints[:i + 1] += 1"])]
        elif part == "flags":
            body += [rng.choice(["flags[i] = h > 0", "flags[i, :1] = True",
                                 "flags[i] |= row < 0"])]
        elif part == "total":
            body += [rng.choice(["total += float(h.sum())", "total = total * 0.5 + h[0]",
                                 "total += float(np.abs(h).max())"])]
        elif part == "append":
            body += [f"if i % {rng.choice([1, 2, 3])} == 0 or i == n - 1:",
                     "    costs.append(float(h @ h))"]
        elif part == "break":
            body += [f"if {rng.choice(['hits > 1', 'total > 1.0', 'h.sum() < -1'])}:",
                     "    break"]
        elif part == "return":
            body += [f"if {rng.choice(['hits > 2', 'total > 2.0', 'h.min() < -0.9'])}:",
                     "    return h, hits"]
    if header.startswith("while"):
        body.append("i += 1")
    lines += [pad + line for line in body]
    lines.append("return h, hits, total, ints, flags, costs, i")
    source = "def program(x, n):\n" + "".join(f"    {line}\n" for line in lines)
    kind = rng.choice(["int", "int", "i64", "zerod_i"])
    counts = [int(rng.integers(0, 12)) for _ in range(4)] + [0, 1, 2, -1, 5, 3]
    shapes = [(int(rng.choice((3, 5, 7))), int(rng.choice((1, 2, 3))))] + [
        (int(rng.choice((1, 2, 3, 5, 7, 11))), int(rng.choice((1, 2, 3)))) for _ in range(2)]
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        shape = shapes[0] if call < 3 else shapes[call % len(shapes)]
        x = layout(data(local, shape, dtype, 0.05 if call % 5 == 4 else 0.0),
                   ["C", "F", "rev", "every_other"][call % 4])
        return x, scalar(local, kind, counts[call % len(counts)])

    return Drawn("loop_forms", source, make, calls=10, float32=dtype == "float32")


def _one_result(params, lines, test):
    """``program(params)`` running ``lines`` and returning ``out`` and ``side``: which
    branch of ``if test:`` ran (1 or 2, compared exactly), or 0 without a test."""
    if test:
        lines = lines + [f"if {test}:", "    side = 1", "else:", "    side = 2"]
    else:
        lines = lines + ["side = 0"]
    lines.append("return out, side")
    return f"def program({params}):\n" + "".join(f"    {line}\n" for line in lines)


# --- (b) dtype mixes -------------------------------------------------------------------------
SCALAR_KINDS = ("int", "float", "f32", "i64", "zerod", "zerod_i", "u8", "bool")


def dtype_mix(rng):
    da, db = rng.choice(DTYPES), rng.choice(DTYPES)
    skind = rng.choice(SCALAR_KINDS)
    svalue = rng.choice([0, 1, 2, -1, 3.5, -2.5, 200, 0.5])
    op = rng.choice([
        "a + b", "a - b", "a * b", "a / b", "a // b", "a % b", "a ** 2", "a * s", "s - a",
        "a + s * b", "a < b", "a >= s", "a == b", "s < a", "np.where(a > b, a, s)",
        "np.where(a > 0, s, b)", "np.clip(a, -1, s)", "np.clip(a, s, None)",
        "np.clip(a, b, 3)", "np.maximum(a, s)", "np.minimum(a, b)",
        "np.sum(a, dtype=np.float32)", "np.sum(a, axis=0, dtype=np.int64)",
        "np.sum(a, axis=-1, keepdims=True)", "np.sum(a, where=b > 0)",
        "np.sum(a, axis=0, where=b > 0, keepdims=True)", "np.max(a, axis=0, initial=s)",
        "np.mean(a, axis=0, dtype=np.float64)", "np.prod(a, axis=-1, dtype=np.float64)",
        "np.cumsum(a, axis=0)", "np.cumsum(a, axis=-1, dtype=np.float64)",
        "np.cumprod(a, axis=0, dtype=np.float32)", "np.cumsum(a)", "a.sum(axis=1) + s",
        "np.add(a, b, out=np.zeros(np.broadcast(a, b).shape))",
        "np.sum(a, axis=0, out=np.zeros(a.shape[1:]))", "np.abs(a) + b", "-a * s",
        "np.logical_and(a, b)", "(a > s) & (b < s)", "np.sign(a) * b",
        "np.count_nonzero(a > s, axis=0)", "np.any(a > s, axis=-1, keepdims=True)",
        "np.argmax(a + b, axis=0)", "a.astype(np.float32) + s", "np.float32(s) * a",
        "np.asarray(s) + a", "np.true_divide(a, 3)", "np.mean(a, axis=-1, keepdims=True)",
        "np.where(b, a, 0)", "np.sort(a, axis=0)", "a.max(axis=(0, 1), keepdims=True)",
        # round 23's sweep findings: a bool running sum, a ufunc's loop dtype, big bounds
        "np.cumsum(a, axis=-1, dtype=bool)", "np.add.accumulate(a > s, axis=0)",
        "np.add(a, b, dtype=np.float32)", "np.multiply(a, s, dtype=np.float64)",
        "np.negative(a > 0, dtype=np.float32)", "np.clip(a, 0, 2**40)",
        "np.clip(a, -2**40, s)",
    ])
    shape_a = rng.choice([("n", "m"), ("n", 1), (1, "m"), ("m",), (1,), ("n", "m")])
    shape_b = rng.choice([("n", "m"), ("m",), (1,), ("n", 1), ("n", "m")])
    extra = rng.choice(["", "", "out = out * 2", "out = out + a.sum()",
                        "out = np.asarray(out)[..., ::-1] if np.ndim(out) else out"])
    lines = [f"out = {op}"]
    if extra:
        lines.append(extra)
    branch = rng.random() < 0.3  # a decision on the mix: which branch ran is returned
    source = _one_result("a, b, s", lines, "np.sum(out) > 0" if branch else None)
    sizes = [(int(rng.choice((2, 3, 5))), int(rng.choice((2, 3, 7))))]
    sizes += [(int(rng.choice(PRIMES)), int(rng.choice(PRIMES))) for _ in range(3)]
    layouts = [rng.choice(["C", "F", "rev", "every_other"]) for _ in range(4)]
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        n, m = sizes[0] if call < 3 else sizes[call % len(sizes)]
        dims = {"n": n, "m": m}
        a = data(local, tuple(dims.get(d, d) for d in shape_a), da,
                 0.1 if call % 3 == 2 else 0.0)
        b = data(local, tuple(dims.get(d, d) for d in shape_b), db,
                 0.1 if call % 3 == 2 else 0.0)
        value = svalue if call % 2 == 0 else -svalue
        return (layout(a, layouts[call % 4]), layout(b, layouts[(call + 1) % 4]),
                scalar(local, skind, value))

    return Drawn("dtype_mix", source, make, calls=8,
                 float32="float32" in (da, db) or "float16" in (da, db) or skind == "f32"
                 or "float32" in op)


# --- (d) hostile values ----------------------------------------------------------------------
def hostile_values(rng):
    dtype = rng.choice(["float64", "float32", "float64"])
    op = rng.choice([
        "np.max(a, axis={ax})", "np.min(a, axis={ax})", "np.argmax(a, axis={ax})",
        "np.argmin(a, axis={ax})", "np.sort(a, axis={ax})", "np.argsort(a, axis={ax}, "
        "kind='stable')", "np.sign(a)", "np.floor_divide(a, b)", "np.mod(a, b)", "a % b",
        "a // b", "np.fmod(a, b)", "np.divmod(a, b)[0]", "a < b", "a <= b", "a == b",
        "a != b", "np.maximum(a, b)", "np.minimum(a, b)", "np.fmax(a, b)", "np.fmin(a, b)",
        "np.nanmax(a, axis={ax})", "np.nanargmax(a, axis={ax})", "np.nanmin(a, axis={ax})",
        "np.isnan(a) | (a > 0)", "np.signbit(a)", "np.copysign(1.0, a)", "np.abs(a)",
        "np.where(a > b, a, b)", "np.clip(a, -1.0, 1.0)", "np.floor(a)", "np.ceil(a)",
        "np.round(a)", "np.sqrt(a)", "1.0 / a", "a * 0.0", "np.max(a)", "np.argmax(a)",
        "np.ptp(a, axis={ax})", "np.cumsum(a, axis={ax})", "np.median(a, axis={ax})",
        "np.exp(a) > 1", "np.heaviside(a, 0.5)", "np.square(a) == 0", "np.nextafter(a, 0)",
        "np.sum(a == -0.0, axis={ax})", "a.astype(np.float32) == a",
        "np.maximum.reduce(a, axis={ax})", "np.minimum.accumulate(a, axis={ax})",
        "np.spacing(a)", "np.logaddexp(a, b)", "np.float_power(np.abs(a), 0.5)",
    ]).format(ax=rng.choice(["0", "-1", "None"]) if "sort" not in "" else "0")
    if "argsort" in op or "sort(" in op or "accumulate" in op or "cumsum" in op:
        op = op.replace("axis=None", "axis=-1")
    branch = rng.random() < 0.4
    source = _one_result("a, b", [f"out = {op}"],
                         "np.any(np.asarray(out) > 0)" if branch else None)
    sizes = [(int(rng.choice((2, 3, 5))), int(rng.choice((2, 3, 7))))]
    sizes += [(int(rng.choice((1, 2, 3, 5, 7, 11))), int(rng.choice((1, 2, 3, 5))))
              for _ in range(3)]
    b_shape = rng.choice(["same", "row", "col", "one"])
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        n, m = sizes[0] if call < 3 else sizes[call % len(sizes)]
        a = data(local, (n, m), dtype, specials=0.35)
        shape = {"same": (n, m), "row": (m,), "col": (n, 1), "one": (1,)}[b_shape]
        b = data(local, shape, dtype, specials=0.35)
        return layout(a, ["C", "F", "rev", "every_other"][call % 4]), b

    return Drawn("hostile_values", source, make, calls=8, float32=dtype == "float32")


FAMILIES = {"counted_loop": counted_loop, "loop_forms": loop_forms, "dtype_mix": dtype_mix,
            "hostile_values": hostile_values}


def draw(seed, families=None):
    return fuzz.draw_family(FAMILIES, seed, families)


# --- comparing -------------------------------------------------------------------------------
def check(program, dynamic="auto"):
    """Eager vs ``jit`` over the program's calls: None, or (kind, text)."""
    import tracejit as tj

    function = fuzz.load(program.source)
    compiled = tj.jit(function, cache="memory", dynamic=dynamic)
    for call in range(program.calls):
        eager_args, jit_args = program.make(call), program.make(call)
        eager_error = jit_error = None
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want = function(*eager_args)
            except Exception as error:  # noqa: BLE001 - eager's exception is the contract
                eager_error = error
            try:
                got = compiled(*jit_args)
            except Exception as error:  # noqa: BLE001
                jit_error = error
        shapes = [(np.shape(arg), getattr(arg, "dtype", type(arg).__name__))
                  for arg in eager_args]
        where = f"call {call} (arguments {shapes})"
        if eager_error is not None or jit_error is not None:
            problem = fuzz.exception_difference(where, eager_error, jit_error)
            if problem:
                return problem
            continue
        scale, count = fuzz.scale_of(fuzz.leaves(want), eager_args)
        problem = fuzz.difference(got, want, scale, count + 16, program.float32)
        if problem:
            return "result differs", f"{where}: {problem}"
        problem = fuzz.difference(jit_args, eager_args, scale, count + 16, program.float32)
        if problem:
            return "arguments differ", f"{where}: {problem}"
    stats = compiled.stats()
    details = repr(stats.get("eager_reasons"))
    for reason in stats.get("eager_calls") or {}:
        refused = "compiled code computes in" in details or "compiled code supports" in details
        if "internal error" in reason or ("not compiled" in reason and not refused):
            return "internal error", (f"{reason}: {stats['eager_reasons'].get(reason)}\n"
                                      f"{compiled.explain()[-3000:]}")
    return None


def agree(function, *calls, rtol=0.0):
    """Each call's arguments, eager vs compiled: the same values (dtype, shape, type; a
    tuple leaf by leaf; within ``rtol``) or the same exception; no internal error. The
    findings tests' check; returns the jit function."""
    import pytest

    import tracejit as tj

    compiled = tj.jit(function, cache="memory")
    for args in calls:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want = function(*args)
            except Exception as error:  # noqa: BLE001 - NumPy's exception is the expectation
                with pytest.raises(type(error)):
                    compiled(*args)
                continue
            got = compiled(*args)
        pairs = zip(got, want) if type(want) is tuple else [(got, want)]
        for got_leaf, want_leaf in pairs:
            assert type(got_leaf) is type(want_leaf), (got_leaf, want_leaf)
            got_leaf, want_leaf = np.asarray(got_leaf), np.asarray(want_leaf)
            assert got_leaf.dtype == want_leaf.dtype, (got_leaf, want_leaf)
            assert got_leaf.shape == want_leaf.shape, (got_leaf, want_leaf)
            np.testing.assert_allclose(got_leaf, want_leaf, rtol=rtol, equal_nan=True)
    reasons = compiled.stats().get("eager_calls") or {}
    assert not any("internal" in reason for reason in reasons), compiled.explain()
    return compiled


def main(draw=draw, check=check, description=None):
    """The offline loop (fuzz24.py runs its own families through it)."""
    parser = argparse.ArgumentParser(description=description or __doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", default="")
    parser.add_argument("--show", type=int)
    args = parser.parse_args()
    import logging

    logging.getLogger("tracejit").setLevel(logging.CRITICAL)
    logging.getLogger("tracejit").propagate = False
    warnings.simplefilter("ignore")
    families = [name for name in args.families.split(",") if name] or None
    if args.show is not None:
        print(draw(args.show, families).source)
        return
    deadline, seed, seen, programs = time.time() + args.minutes * 60, args.seed, set(), 0
    while time.time() < deadline:
        seed += 1
        program = draw(seed, families)
        try:
            with fuzz.time_limit(120):
                result = check(program)
        except Exception as error:  # noqa: BLE001 - the fuzzer's own trouble, noted
            result = ("fuzzer error", "".join(traceback.format_exception(error))[-1500:])
        programs += 1
        if result is not None:
            kind, text = result
            key = (kind, program.source)
            if key not in seen:
                seen.add(key)
                print(f"[seed {seed}] {program.family} {kind}\n{program.source}"
                      f"{text[:1200]}\n", flush=True)
    print(f"done: {programs} programs, {len(seen)} findings", flush=True)


if __name__ == "__main__":
    main()
