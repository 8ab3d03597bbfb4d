"""An offline differential fuzzer: random model-like functions, eager NumPy vs ``jit``.

Not collected by pytest (no ``test_`` prefix). Run it niced, for as long as it finds things::

    nice -n 10 /tmp/venv/bin/python tests/differential/fuzz.py --minutes 20 --seed 1 \\
        --out /tmp/fuzz15

Each program is Python source written statement by statement, every statement checked by
running it eagerly on a probe input whose dims are distinct primes (so a broadcast NumPy
accepts there is one the shapes mean). Statements are model-like: pointwise chains with
weak scalars and NumPy scalars, reductions with ``axis``/``keepdims``, matmul and einsum,
(n,1)x(1,m) broadcasting, views with steps and negative steps, data-dependent ``if``s on
reductions, ``for t in range(n)`` row loops carrying state into buffers written in place,
column loops ``buf[:, i] += ...``, ``while`` loops with a tolerance, boolean-mask writes,
dict and list state, integer gathers, writes into the arguments, 0-d arrays and Python
numbers pulled out with ``float()``/``int()``/``.item()``. Round 16 added: loops over a
dynamic length (reversed, stepped, from 1) carrying ``h = f(h, x[t])`` into buffers filled
in place (``out[t] += h``, ``out[t] = out[t - 1] * 0.5 + h``), with ``if``s on data in the
body; writes through views of locals and arguments (``v = a[1:]; v *= 2``, ``out=``
ufuncs); in-place updates of the arguments, overlapping ones too
(``x[1:] += x[:-1]``); loops writing through a view made before them and reading its
base; ``if``/``elif`` on data; mixed-dtype promotion (int32, int64,
float32, float64, bool, NumPy scalars under NEP 50); reductions over tuples of axes, with
``where=``, ``ddof``, ``axis=None, keepdims=True`` and the NaN-aware ones; NaN/Inf-heavy
expressions; 0-d array arguments, columns and rows of one that broadcast, every-other-column
(non-contiguous) and broadcast-along-the-last-axis layouts; walks of one dim through a
bucket (5, 6, 7, 8) and past its edges. Round 17 added: ``np.cumsum`` over axes and
dtypes (bool, int32, int64; reversed and transposed operands, empty rows, infinities;
carried by loops), log-space arithmetic with infinities (``logaddexp`` against ``-inf``,
the max trick where the max is infinite, a CTC-like table from ``np.full(..., -np.inf)``),
lists and dicts a captured loop fills and the function returns (entries computed per trip,
an array appended as it is, tuples, a dict keyed at the index with entries set before the
loop; the carried value written after it), captured loops an outer constant loop unrolls
that differ only in int offsets (reads at ``t - k``, slices from ``k``, writes at ``t +
k``: one shared program), and results that alias (a value twice, a view and its base, an
argument and views of it); results are compared for ``is``, shared memory and the
writeable flag too ("identity differs"). Round 18 added: loops with data-dependent exits
(``while <test>:``, ``for`` with one ``break``, with ``else:``, ``while True: ... break``)
carrying float32/float64, int and bool arrays or a view written in place, tests that NaN
ends, tolerances exiting on the first trip, never, or after a size-dependent trip count,
a value guard or a ``raise`` in the body, nested in an outer loop; random draws
(``np.random`` seeded alike before the eager and the jit call, its state compared after:
"random state differs"; ``default_rng`` made in the function, ``np.random.seed`` inside,
an ``if`` on a draw); loops writing through a carried view of a local, reading the base
or an alias of it in the body. Round 19 added ``exit_forms``: exit tests joined by
``and``/``or``/``not`` and chained comparisons, Python int counters read after the loop
(an ``if`` on them, returned), the ``for`` index read after it, ``continue`` with
assignments before it, several ``break``s. ``--focus exit_loop,random_draw,write_through_loop``
draws mostly those. Round 22 added three kinds drawn only when ``--focus`` names them (so a
seed draws the program it always drew): ``narrow_result`` (casts to uint8/int8/int16/uint16,
clipped or leaving the range, narrow buffers written in part, read back widened),
``dict_carry`` (a dict of fixed keys carried by a loop: rebuilt, updated in place, ``for k
in p``, a decision on an entry) and ``selected_append`` (``if i % k == c: costs.append(...)``
with negative k, the last trip, a float cost or an array). Round 22e added, under
``--focus`` alike: ``reduction_keywords`` (axis tuples, keepdims, where=, initial=, dtype=),
``einsum_string``, ``window_view`` (im2col by as_strided and sliding_window_view, np.pad
modes, pooling with argmax masks), ``index_call`` (take, take/put_along_axis,
searchsorted, digitize, broadcasting np.where), ``bool_reduction`` (any/all over empty),
``integer_op`` (floor_divide, remainder, powers, shifts, bitwise in int8..uint64),
``rounding_edge`` (.5 ties, huge values) and ``scalar_promotion`` (NEP 50). A statement
that runs over 2 s on the probe is dropped, a program over 300 s is noted as a fuzzer
error.

Each program runs on several argument sets: the probe's shapes four times with fresh data
(the trace, then compiled code), then sizes that move every dim to other buckets (0, 1,
2, primes, 64), with NaN/Inf/-0.0/huge/tiny/denormal values, F-order, negative strides,
broadcast views and read-only arrays. Eager and compiled must agree on results (types,
dtypes, shapes, values within tolerances scaled like ``test_random_programs``), on the
arguments afterwards, and on exceptions (the same type). A call that fell back because
tracejit failed internally is reported too.

Not generated yet: Tensors and gradients, ``static_argnames`` and keyword arguments,
globals, closures and objects' attributes read or written, methods and classes, generators
and ``try``/``except``, ``np.random``, convolutions, string and ``print`` side effects,
nested jit functions, ``compile="background"`` and the disk cache, float16/complex/narrow
integer arguments (``test_fuzz_findings15`` has them as a table), ``np.errstate`` other
than "ignore".

A worker process runs the programs; the parent restarts it when it dies (a native crash
is a finding: the program it was running is kept). Each finding is minimized (statements
and argument sets dropped while the same kind of failure remains) and written to
``OUT/finding-*.py``, a standalone script that prints the difference.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import linecache
import os
import signal
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np

PROBE = {"n": 5, "m": 3, "k": 2}
SIZES = (0, 1, 2, 3, 7, 13, 17, 31, 64)
FLOAT_SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 1e300, -1e300, 1e-310, 5e-324, 1e-300)
F32_SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 3e38, -3e38, 1e-40, 1e-45, 1e-38)
RTOL = {"f4": 1e-4, "f8": 1e-9, "f2": 1e-2}
# results' is / shared memory / writeable compared too (off: --values-only, to hunt wrong
# values while known identity differences stand)
CHECK_IDENTITY = os.environ.get("FUZZ_VALUES_ONLY") != "1"
FOCUS = [name for name in os.environ.get("FUZZ_FOCUS", "").split(",") if name]


# --- statements --------------------------------------------------------------------------
UNARY = [
    "np.tanh({a})", "np.exp(-np.abs({a}))", "np.abs({a})", "np.sqrt(np.abs({a}))",
    "-{a}", "{a} * {a}", "np.maximum({a}, 0)", "np.clip({a}, -1.5, 2)",
    "{a}.astype(np.float32)", "{a}.astype(np.float64)", "{a}.astype(np.int32)",
    "{a}.astype(bool)", "np.floor({a})", "np.sign({a})", "({a} > 0)", "np.logical_not({a})",
    "{a} * np.float32(2)", "{a} + np.int64(3)", "{a} / 3", "{a} // 2", "{a} % 3",
    "np.log1p(np.abs({a}))", "np.square({a})", "{a} ** 2", "np.power(np.abs({a}), 1.5)",
    "1.0 / (1.0 + np.exp(-{a}))", "np.isnan({a})", "np.nan_to_num({a})",
    "np.where(np.isfinite({a}), {a}, 0.0)", "{a} * 2.5 - 1", "3 - {a}", "np.float64(0.5) * {a}",
    "{a} * np.asarray(2.0)", "np.cumsum({a}, axis=-1)", "np.round({a}, 1)", "np.exp2(-np.abs({a}))",
    "np.sin({a})", "np.cos({a}) * {a}", "np.log(np.abs({a}) + 1e-3)", "np.fabs({a})",
    "np.negative({a})", "np.rint({a})", "np.trunc({a})", "np.ceil({a} * 0.5)",
    "{a}.astype(np.int64) * 3", "np.invert({a})", "{a} & 5", "{a} >> 1", "~({a} > 1)",
    "np.heaviside({a}, 0.5)", "+{a}", "np.reciprocal({a} * {a} + 1.0)",
    "np.expm1(-np.abs({a}))", "np.isinf({a})", "np.sort({a}, axis=-1)",
]
BINARY = [
    "{a} + {b}", "{a} - {b}", "{a} * {b}", "np.maximum({a}, {b})", "np.minimum({a}, {b})",
    "np.where({a} > {b}, {a}, {b})", "{a} / ({b} * {b} + 1)", "{a} > {b}", "{a} == {b}",
    "np.logical_and({a}, {b})", "np.hypot({a}, {b})",
    "{a} // ({b} * {b} + 1)", "np.fmax({a}, {b})", "np.copysign({a}, 2.0)",
    "{a}[:, None] * {b}[None, :]", "np.outer({a}, {b})", "np.where({b}, {a}, -{a})",
    "np.logaddexp({a}, {b})", "{a} * ({b} != 0)", "np.where({a} > 0, {b}, 0)",
]
REDUCE = [
    "np.sum({a}, axis={ax}, keepdims={kd})", "np.mean({a}, axis={ax}, keepdims={kd})",
    "np.max({a}, axis={ax}, keepdims={kd})", "{a}.min(axis={ax}, keepdims={kd})",
    "np.prod({a} * 0.5, axis={ax}, keepdims={kd})", "np.argmax({a}, axis={ax})",
    "np.any({a} > 0, axis={ax}, keepdims={kd})", "{a}.all(axis={ax})",
    "np.std({a}, axis={ax}, keepdims={kd})", "np.var({a}, axis={ax})",
    "np.linalg.norm({a}, axis={ax})", "np.count_nonzero({a} > 0, axis={ax})",
    "np.argmin({a}, axis={ax})", "{a}.sum()", "np.nansum({a}, axis={ax})",
    "np.nanmax({a}, axis={ax})", "np.median({a}, axis={ax})", "np.ptp({a}, axis={ax})",
    "np.max({a}, axis={ax}, initial=-1.0)", "np.sum({a}, axis={ax}, dtype=np.float64)",
    "np.cumprod({a} * 0.5, axis={ax0})", "np.average({a}, axis={ax})",
    "{a} - np.max({a}, axis={ax0}, keepdims=True)",
    "np.exp({a} - np.max({a}, axis=-1, keepdims=True)) / np.sum(np.exp({a} - "
    "np.max({a}, axis=-1, keepdims=True)), axis=-1, keepdims=True)",
    "({a} - {a}.mean(axis=-1, keepdims=True)) / np.sqrt({a}.var(axis=-1, keepdims=True) "
    "+ 1e-5)",
]
CONTRACT = [
    "{a} @ {b}", "np.dot({a}, {b})", "np.einsum('ij,jk->ik', {a}, {b})",
    "np.einsum('ij,ij->i', {a}, {b})", "np.einsum('ij->j', {a})", "{a}.T @ {a}",
    "np.matmul({a}, {b}.T)", "np.tensordot({a}, {b}, axes=1)", "np.einsum('i,i->', {a}, {b})",
    "np.inner({a}, {b})", "np.vdot({a}, {b})", "np.einsum('ij,kj->ik', {a}, {b})",
]
VIEW = [
    "{a}[::-1]", "{a}[..., ::-2]", "{a}.T", "{a}.reshape(-1)", "{a}[1:]", "{a}[:-1]",
    "{a}[::2, 1:]", "{a}.reshape({a}.shape[0], -1)", "np.transpose({a})", "{a}[None]",
    "{a}[:, :1]", "np.ascontiguousarray({a})", "{a}.copy()",
    "np.concatenate([{a}, {b}], axis=0)", "np.stack([{a}, {a}[::-1]])",
    "np.flip({a}, axis=-1)", "np.roll({a}, 1, axis=0)", "{a}[-1]", "{a}[..., -1:]",
    "np.broadcast_to({a}, (2,) + {a}.shape)", "{a}[:, ::-1][1::2]", "{a}.ravel()[::3]",
    "np.expand_dims({a}, -1)", "{a}.reshape(1, -1).T", "np.squeeze({a}[:1])",
    "np.tile({a}, 2)", "np.repeat({a}, 2, axis=0)", "np.diff({a}, axis=0)",
    "np.pad({a}, 1)", "np.moveaxis({a}, 0, -1)", "np.atleast_2d({a})",
    "np.triu({a})", "np.diag({a})",
]
# round 16: mixed dtypes (promotion of int32/int64/float32/float64/bool, NEP 50 scalars)
MIXED = [
    "{a}.astype(np.int32) + {b}.astype(np.int64)", "{a}.astype(np.int32) * np.int32(3)",
    "{a}.astype(np.int32) * 100003", "{a}.astype(np.float32) + {b}.astype(np.int32)",
    "{a}.astype(bool) + {b}.astype(bool)", "{a}.astype(bool) * 3",
    "np.float32(2.5) * {a}.astype(np.int32)", "{a}.astype(np.int64) // {b}.astype(np.int32)",
    "{a}.astype(np.int64) % {b}.astype(np.int32)", "{a}.astype(np.int32) << 3",
    "np.true_divide({a}.astype(np.int32), 3)", "{a}.astype(np.float32) + 1e10",
    "{a}.astype(np.float32) * np.float64(1.5)", "{a}.astype(np.int32) + 1.5",
    "np.where({a} > 0, {a}.astype(np.int32), {b}.astype(np.float32))",
    "np.maximum({a}.astype(np.int32), {b}.astype(np.float32))",
    "{a}.astype(np.int32) ** 2", "np.abs({a}.astype(np.int32))",
    "{a}.astype(np.int32).sum()", "{a}.astype(np.int32).sum(axis={ax}, dtype=np.int32)",
    "np.cumsum({a}.astype(np.int32), axis={ax0})", "np.mean({a}.astype(np.int32), axis={ax})",
    "np.sum({a} > 0, axis={ax}, keepdims={kd})", "{a}.astype(np.float32).mean(axis={ax})",
    "np.prod({a}.astype(np.int32), axis={ax})", "({a} > 0) & ({b} < 1)",
    "({a} > 0) ^ ({b} > 0)", "np.minimum({a}.astype(np.int64), 7) - {b}.astype(np.int32)",
    "{a}.astype(np.int32) / {b}.astype(np.int32)", "-{a}.astype(np.int32)",
    "{a}.astype(np.float64) + np.float32(1e-8)", "{a}.astype(np.int64) * np.float32(0.5)",
    "np.int64(7) - {a}.astype(np.float32)", "{a}.astype(np.float32) ** {b}.astype(np.int32)",
    "np.sign({a}.astype(np.int32))", "np.clip({a}.astype(np.int32), -2, 5)",
    "np.float32({a}.sum()) * {b}", "np.round({a}.astype(np.float32), 2)",
    "{a}.astype(np.int32).astype(np.float32) / 7", "np.remainder({a}, -2.5)",
]
# round 16: reductions over tuples of axes, axis=None with keepdims, NaN-aware ones
REDUCE16 = [
    "np.sum({a}, axis=None, keepdims=True)", "np.max({a}, axis={axt}, keepdims={kd})",
    "np.mean({a}, axis={axt}, keepdims={kd})", "{a}.min(axis={ax}, keepdims=True)",
    "np.all({a} > -1, axis=None, keepdims={kd})", "np.any({a}, axis={axt})",
    "np.nanmean({a}, axis={ax})", "np.nanmin({a}, axis={ax}, keepdims={kd})",
    "np.nanstd({a}, axis={ax})", "np.nanprod({a}, axis={ax})", "np.nanargmax({a})",
    "np.isnan({a}).any(axis={ax})", "np.std({a}, axis={axt}, ddof=1)",
    "np.var({a}, axis={ax}, keepdims={kd}, ddof=0)", "np.amax({a}, axis={ax0})",
    "np.sum({a}, axis={axt}, dtype=np.float32)", "np.prod({a}, axis=None, keepdims={kd})",
    "np.argmax({a}, axis={ax0}, keepdims={kd})", "np.cumsum({a})", "np.mean({a} > 0)",
    "np.linalg.norm({a}, axis={ax}, keepdims={kd})", "np.logical_or.reduce({a} > 0)",
    "np.add.reduce({a}, axis={ax0})", "np.maximum.reduce({a}, axis={ax0})",
    "np.median({a}, axis={ax}, keepdims={kd})", "np.nansum({a}, axis={axt}, keepdims={kd})",
    "np.min({a}, axis={ax}, initial=np.inf, where={a} > 0)",
    "np.sum({a}, axis={ax}, where={a} > 0)",
]
NAN = [
    "np.fmin({a}, {b})", "np.nan_to_num({a}, nan=0.0, posinf=1.0, neginf=-1.0)",
    "np.where(np.isnan({a}), np.inf, {a})", "np.isinf({a}) & ({a} > 0)",
    "np.maximum({a}, np.nan)", "{a} * np.inf", "{a} - np.inf", "{a} / 0.0", "0.0 / {a}",
    "np.floor_divide({a}, 0.0)", "np.remainder({a}, np.inf)", "np.sign({a} * np.inf)",
    "np.clip({a}, np.float32(-1), np.inf)", "np.exp({a} * 1000)", "np.log({a})",
    "np.sqrt({a})", "np.sinh({a})", "np.minimum({a}, {b}) == {a}",
    "np.isfinite({a}).all()", "np.sort({a}, axis=0)", "np.argsort({a}, axis=-1, "
    "kind='stable')", "np.tanh({a} * 1e300)", "np.power({a}, 0)", "np.power(2.0, {a})",
    "{a} * 8.0", "{a} != {a}", "np.fmin({a}, np.nan)",
]


# round 17: cumsum (axes, dtypes, reversed views, 0-size rows), log-space arithmetic with
# infinities (logaddexp against -inf, the max trick where the max is infinite)
CUMSUM = [
    "np.cumsum({a}[::-1], axis=0)", "np.cumsum({a}, axis={ax0})[::-1]",
    "np.cumsum({a}, axis={ax0}, dtype=np.float32)", "np.cumsum({a} > 0, axis={ax0})",
    "np.cumsum({a}.astype(np.int32), axis=-1)", "{a}.cumsum()", "{a}[..., ::-1].cumsum(-1)",
    "np.cumsum({a}, axis={ax0}) - np.cumsum({a}[::-1], axis={ax0})[::-1]",
    "np.cumsum({a}[:0], axis=0)", "np.cumsum({a}.T, axis={ax0})", "np.cumsum({a} * np.inf)",
    "np.cumsum({a}, axis={ax0}, dtype=np.int64)", "np.cumsum(np.abs({a}), axis={ax0}) > 2",
    "np.cumsum({a}.astype(bool).astype(np.int32), axis={ax0}, dtype=np.int32)",
    "np.cumsum({a}[::2], axis=0)[-1:]", "np.diff(np.cumsum({a}, axis={ax0}), axis={ax0})",
]
LOGSPACE = [
    "np.logaddexp({a}, -np.inf)", "np.logaddexp({a}, np.inf)", "np.logaddexp({a}, {b})",
    "np.logaddexp(np.where({a} > 0, {a}, -np.inf), {b})", "np.logaddexp2({a}, {a} - np.inf)",
    "np.max({a}, axis=-1, keepdims=True) + np.log(np.sum(np.exp({a} - np.max({a}, axis=-1, "
    "keepdims=True)), axis=-1, keepdims=True))",
    "np.where(np.isinf(np.maximum({a}, {b})), np.maximum({a}, {b}), np.maximum({a}, {b}) + "
    "np.log1p(np.exp(-np.abs({a} - {b}))))",
    "-np.inf + {a}", "{a} - np.inf * ({b} > 0)", "np.logaddexp(np.full({a}.shape, -np.inf), {a})",
    "np.exp({a} - np.inf)", "np.log(np.exp({a}) + np.exp({b}))", "np.logaddexp({a}, {a})",
    "np.maximum({a}, -np.inf) + np.log(2.0)", "np.logaddexp({a} * np.inf, {b})",
]


@dataclass
class Statement:
    lines: list  # source lines, body-relative indent
    kind: str


@dataclass
class Program:
    params: list
    statements: list = field(default_factory=list)
    returns: list = field(default_factory=list)
    as_dict: bool = False

    def source(self, name="program"):
        lines = [f"def {name}({', '.join(self.params)}):"]
        for statement in self.statements:
            lines += ["    " + line for line in statement.lines]
        if self.as_dict:
            items = ", ".join(f"{name!r}: {name}" for name in self.returns)
            lines.append(f"    return {{{items}}}")
        else:
            lines.append(f"    return ({', '.join(self.returns)}{',' if self.returns else ''})")
        return "\n".join(lines) + "\n"


def load(source, name="program"):
    """The function ``source`` defines, with its text in ``linecache`` (tracejit's front end
    reads it like a user's file)."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    filename = f"<fuzz-{digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"np": np}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - generated here
    return namespace[name]


# --- inputs --------------------------------------------------------------------------------
@dataclass
class Param:
    name: str
    dims: tuple  # dim symbols, or "scalar"
    dtype: str
    layout: str  # C, F, neg, bcast, bcast1, strided, ro, pyfloat, pyint, np32, npi64, zerod


def draw_params(rng):
    params = [Param("x", ("n", "m"), rng.choice(["f4", "f8", "f8", "f4", "i4", "i8", "?"]),
                    rng.choice(["C", "C", "C", "F", "neg", "bcast", "ro", "strided",
                                "bcast1"]))]
    if rng.random() < 0.6:
        params.append(Param("w", ("m", "k"), rng.choice(["f4", "f8"]),
                            rng.choice(["C", "C", "F", "neg"])))
    if rng.random() < 0.5:
        params.append(Param("v", ("m",), rng.choice(["f4", "f8", "i8", "?"]),
                            rng.choice(["C", "C", "neg", "ro"])))
    if rng.random() < 0.3:
        params.append(Param("y", ("n",), rng.choice(["labels32", "labels64", "?"]), "C"))
    if rng.random() < 0.4:
        params.append(Param("s", "scalar", "f8",
                            rng.choice(["pyfloat", "pyint", "np32", "npi64", "zerod"])))
    if rng.random() < 0.2:  # a 0-d array argument, written into or read
        params.append(Param("z", (), rng.choice(["f8", "f4", "i8"]), "C"))
    if rng.random() < 0.2:  # a column that broadcasts against x, or a row of one
        params.append(Param("c", rng.choice([("n", 1), (1, "m")]), rng.choice(["f8", "f4"]),
                            rng.choice(["C", "C", "strided"])))
    return params


def make_array(param, sizes, rng, special):
    if param.dims == "scalar":
        value = float(rng.integers(-3, 4)) + 0.5 * rng.integers(0, 2)
        return {"pyfloat": value, "pyint": int(value), "np32": np.float32(value),
                "npi64": np.int64(int(value)), "zerod": np.asarray(value)}[param.layout]
    shape = tuple(sizes[dim] if isinstance(dim, str) else dim for dim in param.dims)
    if param.layout == "bcast":
        base_shape = (1,) + shape[1:]
    elif param.layout == "bcast1":
        base_shape = shape[:-1] + (1,)
    elif param.layout == "strided":  # every other column of a wider array
        base_shape = shape[:-1] + (2 * shape[-1],)
    else:
        base_shape = shape
    if param.dtype in ("f4", "f8"):
        array = (rng.standard_normal(base_shape) * 2.0).astype(param.dtype)
        if special and array.size:
            flat = array.reshape(-1)
            pool = F32_SPECIALS if param.dtype == "f4" else FLOAT_SPECIALS
            picks = rng.integers(0, flat.size, size=min(3, flat.size))
            flat[picks] = np.asarray(rng.choice(pool, size=len(picks))).astype(param.dtype)
    elif param.dtype in ("i4", "i8"):
        high = 2**31 - 5 if special and rng.random() < 0.3 else 20
        array = rng.integers(-high, high + 1, size=base_shape).astype(param.dtype)
    elif param.dtype.startswith("labels"):
        array = rng.integers(0, max(sizes["k"], 1), size=base_shape).astype(
            "i4" if param.dtype == "labels32" else "i8")
    else:
        array = rng.random(base_shape) > 0.5
    array = np.asarray(array)  # a 0-d draw comes back as a NumPy scalar
    if param.layout == "F" and array.ndim > 1:
        array = np.asfortranarray(array)
    elif param.layout == "neg":
        array = np.flip(np.ascontiguousarray(np.flip(array)))
    elif param.layout in ("bcast", "bcast1"):
        array = np.broadcast_to(array, shape)
    elif param.layout == "strided":
        array = array[..., ::2]
    elif param.layout == "ro":
        array = array.copy()
        array.flags.writeable = False
    return array


def make_arguments(params, sizes, seed, special):
    rng = np.random.default_rng(seed)
    return tuple(make_array(param, sizes, rng, special) for param in params)


def copy_arguments(arguments):
    """A deep copy that keeps layouts: negative strides, broadcast views, read-only flags."""
    copies = []
    for value in arguments:
        if isinstance(value, np.ndarray) and value.ndim:
            if value.strides and 0 in value.strides and value.size > 1:
                first = tuple(slice(0, 1) if stride == 0 else slice(None)
                              for stride in value.strides)
                copies.append(np.broadcast_to(value[first].copy(), value.shape))
                continue
            fresh = np.empty_like(value, order="F" if value.flags.f_contiguous
                                  and not value.flags.c_contiguous else "C")
            fresh[...] = value
            if value.ndim and value.strides[0] < 0:
                fresh = np.flip(np.flip(value).copy())  # ascontiguousarray would not copy
            elif not (value.flags.c_contiguous or value.flags.f_contiguous):
                wide = np.empty(value.shape[:-1] + (2 * value.shape[-1],), value.dtype)
                fresh = wide[..., ::2]  # every other column, as make_array's "strided"
                fresh[...] = value
            fresh.flags.writeable = value.flags.writeable
            copies.append(fresh)
        else:
            copies.append(copy.deepcopy(value))
    return tuple(copies)


@contextlib.contextmanager
def time_limit(seconds):
    """Raise TimeoutError in the block after ``seconds`` (a loop whose exit never comes)."""
    def expire(signum, frame):
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --- drawing a program ---------------------------------------------------------------------
class Builder:
    def __init__(self, rng, params, probe):
        self.rng = rng
        self.program = Program([param.name for param in params])
        self.namespace = {"np": np}
        self.namespace.update({param.name: value for param, value in zip(params, probe)})
        self.names = [param.name for param in params]
        self.counter = 0

    def fresh(self):
        self.counter += 1
        return f"t{self.counter}"

    def pick(self, predicate=lambda value: True):
        pool = [name for name in self.names
                if predicate(self.namespace.get(name))]
        return self.rng.choice(pool) if pool else None

    def arrays(self, value):
        return isinstance(value, (np.ndarray, np.generic))

    def try_add(self, lines, kind, defines):
        trial = {key: (value.copy() if isinstance(value, np.ndarray) else value)
                 for key, value in self.namespace.items()}
        for key, value in self.namespace.items():
            if isinstance(value, np.ndarray) and not value.flags.writeable:
                trial[key] = value
        body = "\n".join(lines)
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings(), time_limit(2):
                warnings.simplefilter("ignore")
                exec(body, trial)  # noqa: S102 - generated here
        except Exception:  # noqa: BLE001 - a statement NumPy refuses (or a loop that never
            return False   # ends on the probe) is not kept
        for name in defines:
            value = trial.get(name)
            if isinstance(value, np.ndarray) and (value.size > 20000 or value.ndim > 4):
                return False
        self.namespace = trial
        self.program.statements.append(Statement(lines, kind))
        for name in defines:
            if name not in self.names:
                self.names.append(name)
        return True

    # one statement of each kind; each returns lines and the names it defines
    def expression(self, templates, operands=2):
        template = self.rng.choice(templates)
        names = [self.pick(self.arrays) for _ in range(operands)]
        if None in names:
            return None
        ndim = np.ndim(self.namespace[names[0]])
        axes = list(range(-ndim, ndim)) + [None] if ndim else [None]
        pairs = [(first, second) for first in range(-ndim, ndim) for second in
                 range(-ndim, ndim) if (first - second) % max(ndim, 1)]
        tuples = [(axis,) for axis in axes[:-1]] + pairs + [()]
        text = template.format(a=names[0], b=names[1] if len(names) > 1 else names[0],
                               ax=self.rng.choice(axes), kd=bool(self.rng.integers(0, 2)),
                               ax0=self.rng.choice(axes[:-1] or [0]),
                               axt=self.rng.choice(tuples))
        return text

    def simple(self):
        kind = self.rng.choice(["unary", "unary", "binary", "reduce", "contract", "view",
                                "mixed", "mixed", "reduce16", "nan", "cumsum", "logspace"])
        templates = {"unary": UNARY, "binary": BINARY, "reduce": REDUCE,
                     "contract": CONTRACT, "view": VIEW, "mixed": MIXED,
                     "reduce16": REDUCE16, "nan": NAN, "cumsum": CUMSUM,
                     "logspace": LOGSPACE}[kind]
        text = self.expression(templates)
        if text is None:
            return None
        name = self.fresh()
        return [f"{name} = {text}"], kind, [name]

    def branch(self):
        cond_of = self.pick(self.arrays)
        reduction = self.rng.choice(["np.sum({a})", "np.mean({a})", "np.max({a})",
                                     "{a}.min()", "np.abs({a}).sum()", "np.any({a} > 1)",
                                     "{a}.size", "float(np.std({a}))"])
        threshold = self.rng.choice([0, 0.5, -0.25, 1.0, 3])
        first, second = self.expression(UNARY + BINARY), self.expression(UNARY + BINARY)
        if first is None or second is None:
            return None
        name = self.fresh()
        return [f"if {reduction.format(a=cond_of)} > {threshold}:", f"    {name} = {first}",
                "else:", f"    {name} = {second}"], "if", [name]

    def row_loop(self):
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1)
        if source is None:
            return None
        h, out, t = self.fresh(), self.fresh(), "i" + self.fresh()
        dtype = self.rng.choice(["np.float64", "np.float32", f"{source}.dtype"])
        decay = self.rng.choice(["0.5", "np.float32(0.9)", "0.25"])
        update = self.rng.choice([
            f"np.tanh({source}[{t}] * 0.5 + {h} * {decay})",
            f"{h} * {decay} + {source}[{t}]",
            f"np.where({source}[{t}] > 0, {h} + 1, {h} * {decay})",
            f"np.maximum({h}, {source}[{t}])",
            f"{h} + {source}[{t}] - {source}[{t} - 1]",
            f"{h} * {decay} + {source}[::-1][{t}]",
        ])
        write = self.rng.choice([f"{out}[{t}] = {h}", f"{out}[{t}] += {h} * 2",
                                 f"{out}[{t}, ...] = {h} > 0", f"{out}[-{t} - 1] = {h}"])
        out_dtype = self.rng.choice(["np.float64", dtype])
        lines = [f"{h} = np.zeros({source}.shape[1:], dtype={dtype})",
                 f"{out} = np.zeros({source}.shape, dtype={out_dtype})",
                 f"for {t} in range({source}.shape[0]):",
                 f"    {h} = {update}",
                 f"    {write}"]
        if self.rng.random() < 0.3:
            acc = self.fresh()
            lines.insert(0, f"{acc} = 0.0")
            lines.append(f"    {acc} = {acc} + np.sum({h})")
            return lines, "row loop", [h, out, acc]
        if self.rng.random() < 0.3:
            lines.insert(3, f"    if np.sum({source}[{t}]) > 2:")
            lines.insert(4, "        continue")
        return lines, "row loop", [h, out]

    def matmul_loop(self):
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim == 2)
        weight = "w" if "w" in self.program.params else None
        if source is None or weight is None:
            return None
        h, hs, t = self.fresh(), self.fresh(), "i" + self.fresh()
        kind = self.rng.choice(["list", "dict", "buffer"])
        if kind == "list":
            return [f"{h} = np.zeros({weight}.shape[1])", f"{hs} = []",
                    f"for {t} in range({source}.shape[0]):",
                    f"    {h} = np.tanh({source}[{t}] @ {weight} + 0.5 * {h})",
                    f"    {hs}.append({h})",
                    f"{hs} = np.stack({hs}) if {hs} else np.zeros((0, {weight}.shape[1]))"], \
                "rnn list", [h, hs]
        if kind == "dict":
            return [f"{hs} = {{'h': np.zeros({weight}.shape[1]), 'n': 0}}",
                    f"for {t} in range({source}.shape[0]):",
                    f"    {hs}['h'] = np.tanh({source}[{t}] @ {weight}) + {hs}['h'] * 0.5",
                    f"    {hs}['n'] += 1",
                    f"{h} = {hs}['h'] * {hs}['n']"], "rnn dict", [h]
        return [f"{hs} = np.empty(({source}.shape[0], {weight}.shape[1]))",
                f"{h} = np.zeros({weight}.shape[1])",
                f"for {t} in range({source}.shape[0]):",
                f"    {h} = np.maximum({source}[{t}] @ {weight} - {h}, 0)",
                f"    {hs}[{t}] = {h}"], "rnn buffer", [h, hs]

    def column_loop(self):
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim == 2)
        if source is None:
            return None
        buf, i = self.fresh(), "j" + self.fresh()
        op = self.rng.choice(["+=", "-=", "*=", "="])
        return [f"{buf} = np.ones({source}.shape, dtype=np.float64)",
                f"for {i} in range({source}.shape[1]):",
                f"    {buf}[:, {i}] {op} {source}[:, {i}] * 2 + {i}"], "column loop", [buf]

    def while_loop(self):
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.dtype.kind in "fiub")
        if source is None:
            return None
        z, g, it = self.fresh(), self.fresh(), self.fresh()
        dtype = self.rng.choice(["np.float64", "np.float32"])
        tol = "1e-9" if dtype == "np.float64" else "1e-4"
        return [f"{z} = np.abs(np.nan_to_num({source})).astype({dtype}) + 1",
                f"{g} = {z}.copy()", f"{it} = 0",
                f"while {z}.size and np.max(np.abs({g} * {g} - {z}) / {z}) > {tol} "
                f"and {it} < 40:",
                f"    {g} = ({g} + {z} / {g}) * 0.5",
                f"    {it} += 1"], "while", [g, it]

    def mask_write(self):
        target = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1)
        if target is None:
            return None
        name = self.fresh()
        mask = self.rng.choice([f"{name} > 0", f"np.isnan({name})", f"{name} < -1",
                                f"~np.isfinite({name})"])
        value = self.rng.choice(["0", "-1.5", "np.float32(3)", "np.nan"])
        op = self.rng.choice(["=", "*=", "+="]) if "[" not in value else "="
        return [f"{name} = {target}.astype(np.float64)", f"{name}[{mask}] {op} {value}"], \
            "mask write", [name]

    def argument_write(self):
        target = self.rng.choice([p for p in self.program.params if p != "s"])
        write = self.rng.choice([f"{target}[0] = 1", f"{target} *= 2", f"{target}[::2] += 1",
                                 f"{target}[{target} > 1] = 1", f"{target}[..., -1] = 0",
                                 f"{target}[:] = {target}[::-1].copy()",
                                 f"{target}[:] = {target}[::-1]"])
        return [write], "argument write", []

    def python_number(self):
        source = self.pick(self.arrays)
        if source is None:
            return None
        name = self.fresh()
        text = self.rng.choice([f"float(np.sum({source}))", f"int(np.argmax({source}))",
                                f"np.sum({source}).item()", f"len({source})",
                                f"{source}.shape[-1] * 2", f"bool(np.all({source} > -5))",
                                f"np.asarray(np.mean({source}))",
                                f"float(np.max({source}, initial=0))"])
        return [f"{name} = {text}"], "python number", [name]

    def gather(self):
        if "y" not in self.program.params:
            return None
        name = self.fresh()
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim == 2)
        if source is None:
            return None
        text = self.rng.choice([f"{source}[y]", f"{source}[:, y % {source}.shape[1]]",
                                f"{source}[np.arange({source}.shape[0]), y % "
                                f"{source}.shape[1]]", f"np.take({source}, y, axis=0)",
                                "np.bincount(y, minlength=3)"])
        return [f"{name} = {text}"], "gather", [name]

    # --- round 16: loops over a dynamic length, views written through, in-place updates ---
    def dynamic_loop(self):
        """A ``for t in range(len)`` loop the tracer should capture: a carried state
        ``h = f(h, src[t])``, a buffer filled in place, sometimes an ``if`` on data in the
        body, a reversed or stepped range, a recurrence through the buffer itself."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1)
        if source is None:
            return None
        h, out, t = self.fresh(), self.fresh(), "i" + self.fresh()
        dtype = self.rng.choice(["np.float64", "np.float32", f"{source}.dtype", "np.int64"])
        row = f"{source}[{t}]"
        step = self.rng.choice([
            f"{h} = {h} * 0.5 + {row}", f"{h} = np.tanh({h} + {row})",
            f"{h} = np.maximum({h}, {row})", f"{h} = {h} + ({row} > 0)",
            f"{h} *= 0.5\n{h} += {row}", f"{h} = np.where(np.isnan({row}), {h}, {row})",
            f"{h} = {h} - {h}.mean() + {row}", f"{h} = np.minimum({h} + 1, {row} * 2)",
            f"{h} = ({h} + {row}).astype({dtype})", f"{h}[...] = {h} * 0.25 + {row}",
        ])
        if self.rng.random() < 0.35:  # an if on data inside the body: a guard per trip
            condition = self.rng.choice([f"{row}.sum() > 0", f"np.max({row}) > 1",
                                         f"np.isnan({row}).any()", f"{h}.sum() > 2",
                                         f"{t} % 2 == 0", f"np.all({row} >= 0)"])
            other = self.rng.choice([f"{h} = {h} * 0.5", f"{h} = -{h}", "continue",
                                     f"{h} = {h} + 1"])
            body = [f"if {condition}:"] + ["    " + line for line in step.split("\n")] + [
                "else:", f"    {other}"]
        else:
            body = step.split("\n")
        write = self.rng.choice([f"{out}[{t}] = {h}", f"{out}[{t}] += {h}",
                                 f"{out}[{t}, ...] = {h} * 2", f"{out}[{t}] = {out}[{t} - 1] "
                                 f"* 0.5 + {h}", f"{out}[{t}][...] = {h}",
                                 f"{out}[{t}] -= {out}[{t}].mean()"])
        length = f"{source}.shape[0]"
        ranges = self.rng.choice([f"range({length})", f"range({length})",
                                  f"range({length} - 1, -1, -1)", f"range(1, {length})",
                                  f"range(0, {length}, 2)", f"range(len({source}))"])
        out_dtype = self.rng.choice(["np.float64", dtype, "np.float32"])
        lines = [f"{h} = np.zeros({source}.shape[1:], dtype={dtype})",
                 f"{out} = np.zeros({source}.shape, dtype={out_dtype})",
                 f"for {t} in {ranges}:"] + ["    " + line for line in body + [write]]
        defines = [h, out]
        if self.rng.random() < 0.3:
            count = self.fresh()
            lines.insert(0, f"{count} = 0")
            lines.append(f"    {count} += int({h}.size > 0 and np.all({h} > 0))")
            defines.append(count)
        return lines, "dynamic loop", defines

    def view_write(self):
        """``v = a[1:]; v *= 2``: a write through a view of a local (or of an argument), the
        base read afterwards."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1)
        if source is None:
            return None
        base, view = self.fresh(), self.fresh()
        if source in self.program.params and self.rng.random() < 0.5:
            base_line, base = None, source  # through a view of the argument itself
        else:
            base_line = f"{base} = " + self.rng.choice([
                f"{source}.astype(np.float64)", f"{source}.copy()", f"np.array({source})",
                f"{source} * 1", f"np.ascontiguousarray({source}.T)",
                f"np.zeros_like({source}, dtype=np.float32) + {source}"])
        view_text = self.rng.choice([f"{base}[1:]", f"{base}[::-1]", f"{base}.T",
                                     f"{base}[..., ::2]", f"{base}.reshape(-1)", f"{base}[None]",
                                     f"{base}[0]", f"{base}[:, 0]", f"{base}[1:][::-1]",
                                     f"{base}[:-1, 1:]", f"{base}[...]", f"{base}.T[::2]",
                                     f"{base}[:]", f"{base}[-1:]"])
        op = self.rng.choice([f"{view} *= 2", f"{view} += 1", f"{view}[...] = 0",
                              f"{view}[0] = 7", f"np.multiply({view}, 3, out={view})",
                              f"{view}[{view} > 0] = 0", f"{view} -= {view}.mean()",
                              f"{view}[:] = {view}[::-1]", f"{view} += {base}.sum()",
                              f"np.negative({view}, out={view})", f"{view}[...] = 2",
                              f"{view}[...] = np.nan", f"{view} /= 2"])
        lines = ([base_line] if base_line else []) + [f"{view} = {view_text}", op]
        defines = [view] + ([base] if base_line else [])
        if self.rng.random() < 0.4:  # the base and the view read after the write
            total = self.fresh()
            lines.append(f"{total} = {base}.sum() + {view}.sum()")
            defines.append(total)
        return lines, "view write", defines

    def view_loop(self):
        """A loop writing through a view made before it and reading the base (or the other
        way round): ``ahead = y[1:]; for t ...: ahead[t] = ahead[t] * 0.5 + y[t]``."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1)
        if source is None:
            return None
        base, view, t = self.fresh(), self.fresh(), "i" + self.fresh()
        if source in self.program.params and self.rng.random() < 0.3:
            lines, base = [], source
        else:
            lines = [f"{base} = {source}.astype(np.float64)"]
        view_text, read, write_target = self.rng.choice([
            (f"{base}[1:]", f"{base}[{t}]", f"{view}[{t}]"),
            (f"{base}[:-1]", f"{view}[{t} - 1]", f"{base}[{t}]"),
            (f"{base}[::-1]", f"{base}[{t}]", f"{view}[{t}]"),
            (f"{base}[1:]", f"{base}[{t}] * {view}[{t}]", f"{view}[{t}]"),
        ])
        length = f"{view}.shape[0]" if write_target.startswith(view) else f"{base}.shape[0]"
        start = "1" if f"{view}[{t} - 1]" in read else "0"
        op = self.rng.choice(["=", "+=", "*="])
        lines += [f"{view} = {view_text}", f"for {t} in range({start}, {length}):",
                  f"    {write_target} {op} {read} * 0.5 + 1"]
        return lines, "view loop", [view] + ([] if base == source else [base])

    def inplace_argument(self):
        """In-place ufuncs and updates on the arguments (the caller sees them)."""
        target = self.rng.choice([p for p in self.program.params if p != "s"])
        other = self.pick(self.arrays) or target
        write = self.rng.choice([
            f"{target} += 1", f"{target} *= {other}", f"np.add({target}, 1, out={target})",
            f"np.tanh({target}, out={target})", f"{target}[...] = np.clip({target}, -1, 1)",
            f"{target} -= {target}.mean(axis=0)", f"{target} /= 2",
            f"np.maximum({target}, 0, out={target})", f"{target}[1:] += {target}[:-1]",
            f"{target}[..., 1:] = {target}[..., :-1]", f"{target}[::-1] += {target}",
            f"{target} **= 2", f"{target} //= 3", f"{target} |= True",
            f"{target}[...] = {other}", f"{target}[{target} != {target}] = 0",
            f"{target}.T[...] += 1", f"np.subtract({target}, {other}, out={target})",
            f"{target}[0], {target}[-1] = {target}[-1], {target}[0]",
        ])
        return [write], "in-place argument", []

    def data_branch(self):
        """An ``if`` on data outside loops, with elif and a nested condition; the taken arm
        may write in place."""
        source = self.pick(self.arrays)
        if source is None:
            return None
        name = self.fresh()
        conditions = [f"np.isnan({source}).any()", f"{source}.size == 0",
                      f"np.all({source} > 0)", f"float(np.sum({source})) > 1.5",
                      f"{source}.ndim and {source}.shape[0] > 3",
                      f"np.max({source}, initial=-np.inf) > 2", f"np.any({source} < -1)",
                      f"np.count_nonzero({source}) % 2 == 1", f"bool(np.isinf({source}).any())"]
        first, second = self.rng.choice(conditions), self.rng.choice(conditions)
        arms = [self.expression(UNARY + MIXED + NAN) for _ in range(3)]
        if None in arms:
            return None
        lines = [f"if {first}:", f"    {name} = {arms[0]}", f"elif {second}:",
                 f"    {name} = {arms[1]}", "else:", f"    {name} = {arms[2]}"]
        if self.rng.random() < 0.3:
            lines += [f"if np.ndim({name}) and np.size({name}):",
                      f"    {name} = np.array({name})", f"    {name}[..., 0] = -1"]
        return lines, "data if", [name]

    # --- round 17: returned lists and dicts, offset loops, scans and log space in loops ---
    def filled_loop(self):
        """A list or dict a captured loop fills, returned whole (one compile per bucket:
        ``tracer/loop_rows.py``): entries computed per trip, an array appended as it is,
        tuples of both, a dict keyed at the index with an entry set before the loop."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1)
        if source is None:
            return None
        h, hs, t = self.fresh(), self.fresh(), "i" + self.fresh()
        row = f"{source}[{t}]"
        step = self.rng.choice([f"{h} = np.tanh({h} * 0.5 + {row})", f"{h} = {h} + {row}",
                                f"{h} = np.maximum({h}, {row}) * 1.0",
                                f"{h} = np.cumsum({h} + {row}, axis=-1)" if np.ndim(
                                    self.namespace[source]) > 1 else f"{h} = {h} + {row}",
                                f"{h} = np.logaddexp({h}, {row})"])
        entry = self.rng.choice([h, f"{h} * 2", f"({h}, {row})", f"({h}, {source})",
                                 f"{h}.sum()", f"float({h}.sum())", f"{source}", row,
                                 f"({h}, {h}.max())"])
        kind = self.rng.choice(["list", "list", "dict", "dict-before"])
        ranges = self.rng.choice([f"range({source}.shape[0])", f"range(1, {source}.shape[0])",
                                  f"range({source}.shape[0] - 1, -1, -1)"])
        start = self.rng.choice(["np.zeros({0}.shape[1:])", "np.full({0}.shape[1:], -np.inf)",
                                 "{0}[0] * 0.0"]).format(source)
        lines = [f"{h} = {start}"]
        if kind == "list":
            lines += [f"{hs} = []", f"for {t} in {ranges}:", f"    {step}",
                      f"    {hs}.append({entry})"]
        elif kind == "dict":
            lines += [f"{hs} = {{}}", f"for {t} in {ranges}:", f"    {step}",
                      f"    {hs}[{t}] = {entry}"]
        else:
            lines += [f"{hs} = {{-1: {h}, 'first': 0}}", f"for {t} in {ranges}:",
                      f"    {step}", f"    {hs}[{t}] = {entry}"]
        if self.rng.random() < 0.3:  # the carried value written after the loop
            lines.append(f"{h}[...] = 7.0" if np.ndim(self.namespace[source]) > 1
                         else f"{h} = {h} + 7.0")
        return lines, "filled loop", [h, hs]

    def offset_loops(self):
        """Captured loops an outer constant loop unrolls, differing only in int offsets
        (``codegen/loop_sharing.py``): reads at t - k (wrapping for t < k), slices from k,
        writes at t + k, a padded source."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1)
        if source is None:
            return None
        out, k, t = self.fresh(), "k" + self.fresh(), "i" + self.fresh()
        outer = self.rng.choice(["range(3)", "range(2)", "(2, 0, 1)", "range(-1, 2)"])
        read, write, stop, before = self.rng.choice([
            (f"{source}[{t} - {k}]", f"{out}[{t}]", f"{source}.shape[0]", None),
            (f"{source}[({t} + {k}) % {source}.shape[0]]", f"{out}[{t}]",
             f"{source}.shape[0]", None),
            (f"{source}[{t}]", f"{out}[{t} + {k} + 1]", f"{source}.shape[0]",
             f"{out} = np.zeros(({source}.shape[0] + 4,) + {source}.shape[1:])"),
            (f"{source}[{t} + {k} + 1]", f"{out}[{t}]", f"{source}.shape[0] - 3", None),
            (f"np.pad({source}, 2)[{t} + {k} + 1]", f"{out}[{t}]", f"{source}.shape[0]",
             f"{out} = np.zeros(({source}.shape[0],) + tuple(d + 4 for d in "
             f"{source}.shape[1:]))"),
            (f"{source}[{t}, {k} + 1:{k} + 2]", f"{out}[{t}]", f"{source}.shape[0]",
             f"{out} = np.zeros(({source}.shape[0], 1) + {source}.shape[2:])"),
        ])
        op = self.rng.choice(["+=", "=", "-="])
        scale = self.rng.choice([f"({k} + 1)", "0.5", f"{out}[{t}] * 0.5 + 1"])
        lines = [before or f"{out} = np.zeros({source}.shape, dtype=np.float64)",
                 f"for {k} in {outer}:", f"    for {t} in range({stop}):",
                 f"        {write} {op} {read} * {scale}"]
        return lines, "offset loops", [out]

    def carried_scan(self):
        """cumsum and log-space steps carried by a loop: a CTC-like table in log space
        (``np.full(..., -np.inf)``, logaddexp of the row and its shift), a running scan."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim == 2)
        if source is None:
            return None
        table, t = self.fresh(), "i" + self.fresh()
        body = self.rng.choice([
            f"{table}[{t}] = np.logaddexp({table}[{t} - 1], np.concatenate([[-np.inf], "
            f"{table}[{t} - 1][:-1]])) + {source}[{t}]",
            f"{table}[{t}] = np.cumsum({table}[{t} - 1] * 0.5 + {source}[{t}])",
            f"{table}[{t}] = np.logaddexp({table}[{t} - 1] + np.log(0.5), {source}[{t}])",
            f"{table}[{t}] = np.maximum({table}[{t} - 1], {source}[{t}]) + np.log1p("
            f"np.exp(-np.abs({table}[{t} - 1] - {source}[{t}])))",
        ])
        lines = [f"{table} = np.full({source}.shape, -np.inf)",
                 f"{table}[0] = {source}[0]" if self.rng.random() < 0.7 else
                 f"{table}[0, :1] = {source}[0, :1]",
                 f"for {t} in range(1, {source}.shape[0]):", f"    {body}"]
        return lines, "carried scan", [table]

    def exit_loop(self):
        """A loop whose exit is data-dependent (``tracer/while_loops.py``): ``while
        <test>:``, ``for`` with one ``if <test>: break`` (with or without ``else:``), ``while
        True: ... break``; carries of float32/float64, int and bool arrays, a view's base
        written in place, sometimes nested in an outer loop. Tolerances make it exit on the
        first trip, never, or after a trip count that depends on the data and its size; NaN
        in the data makes the test False (while-style tests are written so NaN exits)."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1
                           and v.dtype.kind in "fiub")
        if source is None:
            return None
        y, seen, count, i = self.fresh(), self.fresh(), self.fresh(), "i" + self.fresh()
        dtype = self.rng.choice(["np.float64", "np.float32"])
        half = "0.5" if dtype == "np.float64" else self.rng.choice(["np.float32(0.5)", "0.5"])
        tol = self.rng.choice(["1e-3", "0.5", "1.0", "1e9", "0.0", "2.0"])
        # the continuing condition: False for NaN, so a while loop on it ends
        going = self.rng.choice([f"np.abs({y}).max() > {tol}", f"np.abs({y}).sum() > {tol}",
                                 f"(np.abs({y}) > {tol}).any()", f"np.linalg.norm({y}) > {tol}",
                                 f"{y}.size > 0 and np.abs({y}).max() > {tol}",
                                 f"float(np.abs({y}).mean()) > {tol}",
                                 f"np.max(np.abs({y}), initial=0.0) > {tol}"])
        # (each step reaches 0: 0.75 times the least denormal rounds back to it)
        step = self.rng.choice([f"{y} = {y} * {half}", f"{y} = np.tanh({y}) * 0.5",
                                f"{y} = np.where(np.abs({y}) > 1, {y} * {half}, {y} * 0.25)",
                                f"{y} *= {half}", f"{y}[...] = {y} / 3",
                                f"{y} = {y} / 2 - 0.01 * {y}",
                                f"{y} = ({y} * {half}).astype({dtype})"])
        extras = self.rng.choice([[], [f"{count} = {count} + (np.abs({y}) > {tol})"],
                                  [f"{seen} = {seen} | ({y} < 0)"],
                                  [f"{count} += 1"], [f"{seen} = {seen} ^ ({y} > 0.1)"]])
        view = self.rng.random() < 0.3
        lines = [f"{y}_base = np.clip({source}, -1e6, 1e6).astype({dtype})" + (
            "" if self.rng.random() < 0.6 else f" * {self.rng.choice(['10', '1e-9', '0'])}")]
        if view:  # the loop carries a view; writes in place reach its base
            lines.append(f"{y} = {y}_base[{self.rng.choice(['1:', '::-1'])}]")
        else:
            lines.append(f"{y} = {y}_base.copy()")
        lines += [f"{count} = np.zeros({y}.shape, dtype=np.int64)",
                  f"{seen} = np.zeros({y}.shape, dtype=bool)"]
        form = self.rng.choice(["while", "for", "for-else", "while-true"])
        bound = self.rng.choice(["40", f"{source}.shape[0]", "1", "0", f"{source}.shape[0] + 2"])
        body = [step] + extras
        if self.rng.random() < 0.5:
            body.reverse()
        if self.rng.random() < 0.3:  # a value guard in the body (a side exit, or eager's error)
            arm = self.rng.choice([f"{y} = {y} * 0.0", "raise ValueError('diverged')",
                                   f"{count} = {count} + 1"])
            body.insert(int(self.rng.integers(0, len(body) + 1)),
                        f"if {y}.sum() > {self.rng.choice(['50', '3', '0'])}:\n    {arm}")
        body = [line for text in body for line in text.split("\n")]
        if form == "while":
            loop = [f"while {going}:"] + ["    " + line for line in body]
        else:
            split = int(self.rng.integers(1, len(body) + 1))
            test = (f"    if not ({going}):" if self.rng.random() < 0.7
                    else f"    if {y}.size == 0 or {i} > 5 or np.abs({y}).max() <= {tol}:")
            head = f"for {i} in range({bound}):" if form != "while-true" else "while True:"
            if form == "while-true":
                test = f"    if not ({going}):"
            loop = [head] + ["    " + line for line in body[:split]] + [
                test, "        break"] + ["    " + line for line in body[split:]]
            if form == "for-else":
                loop += ["else:", f"    {y} = -{y}" if not view else f"    {count} -= 1"]
        if self.rng.random() < 0.25:  # nested in an outer loop
            outer = "j" + self.fresh()
            loop = [f"for {outer} in range(2):", f"    {y} = {y} + {outer}" if not view
                    else f"    {y} += {outer}"] + ["    " + line for line in loop]
        lines += loop
        defines = [y, count, seen] + ([f"{y}_base"] if view or self.rng.random() < 0.3 else [])
        return lines, "exit loop", defines

    def exit_forms(self):
        """The round-19 exit forms (``tracer/exit_tests.py``, ``exit_ints.py``,
        ``exit_trips.py``): tests joined by ``and``/``or``/``not`` and chained comparisons,
        Python int counters (``it += 1``) read after the loop (an ``if`` on them, returned),
        the ``for`` index read after the loop, ``continue`` with assignments before it,
        several ``break``s, a step size halved before a ``continue``."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1
                           and v.dtype.kind in "fiub")
        if source is None:
            return None
        y, it, lr, i = self.fresh(), self.fresh(), self.fresh(), "i" + self.fresh()
        dtype = self.rng.choice(["np.float64", "np.float32"])
        tol = self.rng.choice(["1e-3", "0.5", "1.0", "1e9", "0.0"])
        cap = self.rng.choice(["0", "1", "3", "25", f"{source}.shape[0]"])
        norm = self.rng.choice([f"np.abs({y}).max(initial=0.0)", f"np.abs({y}).sum()",
                                f"float(np.linalg.norm({y}))"])
        going = self.rng.choice([
            f"{norm} > {tol} and {it} < {cap}", f"{it} < {cap} and {norm} > {tol}",
            f"{norm} > {tol} or {it} < 2", f"not ({norm} <= {tol}) and {it} <= {cap}",
            f"0 <= {it} < {cap} and {norm} > {tol}", f"{norm} > {tol}",
            f"({y} > {tol}).any() and not {it} >= {cap}"])
        step = self.rng.choice([f"{y} = {y} * {lr}", f"{y} = np.tanh({y}) * {lr}",
                                f"{y} *= 0.5", f"{y} = {y} - {lr} * {y} * 0.5"])
        lines = [f"{y} = np.clip({source}, -1e6, 1e6).astype({dtype})"
                 + self.rng.choice(["", "", " * 10", " * 0"]),
                 f"{it} = {self.rng.choice(['0', '0', '1'])}", f"{lr} = 0.5"]
        body = [f"{it} += 1", step]  # (the counter first: a continue never skips it)
        # extra exits anywhere at the top level of the body
        extra = self.rng.choice([
            [], [f"if {y}.size == 0:", "    break"],
            [f"if {norm} > 1e3:", f"    {lr} = {lr} * 0.5", f"    {y} = {y} * {lr}",
             "    continue"],
            [f"if {it} % 2 == 1 and {norm} < 4:", "    continue"],
            [f"if {norm} < {tol} * 2 or {it} > 30:", "    break"],
            [f"if {it} == 3:", f"    {lr} = {lr} * 0.5", "    continue",
             f"if {norm} < 1e-6:", "    break"]])
        split = int(self.rng.integers(1, len(body) + 1))
        body = body[:split] + extra + body[split:]
        form = self.rng.choice(["while", "while", "for", "while-true"])
        if form == "while":
            loop = [f"while {going}:"] + ["    " + line for line in body]
        else:
            at = int(self.rng.integers(1, len(body) + 1))
            test = [f"if not ({going}):", "    break"]
            body = body[:at] + test + body[at:]
            head = (f"for {i} in range({self.rng.choice(['40', f'{source}.shape[0]', '2'])}):"
                    if form == "for" else "while True:")
            loop = [head] + ["    " + line for line in body]
        after = self.rng.choice([[], [f"if {it} > 2:", f"    {y} = {y} + 1"],
                                 [f"{y} = {y} * {it}"],
                                 [f"{lr} = {lr} + {it}"]])
        if form == "for" and self.rng.random() < 0.4:
            after = after + [f"{y} = {y} + {i}"]  # the index read after the loop
        lines += loop + after
        defines = [y, it] + ([lr] if self.rng.random() < 0.5 else [])
        return lines, "exit forms", defines

    def random_draw(self):
        """Draws from ``np.random`` (the legacy global), a ``default_rng`` made in the
        function, or ``np.random.seed`` inside it (``tracer/random_draws.py``); the fuzzer
        seeds ``np.random`` alike before the eager and the jit call and compares its state
        afterwards. Sometimes an ``if`` on a drawn value, or on data after a draw (a side
        exit must put the state back)."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1)
        if source is None:
            return None
        name = self.fresh()
        shape = self.rng.choice([f"{source}.shape", f"{source}.shape[-1]", "3",
                                 f"({source}.shape[0], 2)"])
        draw = self.rng.choice([
            f"np.random.rand(*{shape})" if shape.endswith(")") or shape.endswith(".shape")
            else f"np.random.rand({shape})",
            f"np.random.standard_normal({shape})", "np.random.randn()",
            f"np.random.binomial(1, 0.5, size={shape})", f"np.random.uniform(-1, 1, {shape})",
            f"np.random.randint(0, 5, size={shape})", f"np.random.normal(0.0, 2.0, {shape})",
            f"np.random.permutation({source}.shape[0])", f"np.random.random_sample({shape})",
            f"np.random.default_rng(7).standard_normal({shape})",
            f"np.random.default_rng(7).integers(0, 3, {shape})",
            f"np.random.exponential(1.0, {shape})",
        ])
        use = self.rng.choice([f"{name} = {draw}", f"{name} = {source} * 0 + {draw}"
                               if shape == f"{source}.shape" else f"{name} = {draw}"])
        lines = [use]
        if self.rng.random() < 0.15:
            lines.insert(0, f"np.random.seed({int(self.rng.integers(0, 3))})")
        if self.rng.random() < 0.3:  # a decision on data or on a draw, a draw in one arm
            other = self.fresh()
            condition = self.rng.choice([f"np.sum({source}) > 0", "np.random.rand() < 0.5",
                                         f"np.mean({name}) > 0"])
            lines += [f"if {condition}:", f"    {other} = np.random.rand(2)", "else:",
                      f"    {other} = np.zeros(2)"]
            return lines, "draw", [name, other]
        return lines, "draw", [name]

    def write_through_loop(self):
        """A captured loop writing in place through a carried view made before it
        (``tracer/loop_write_through.py``): ``total = out[0]; for t ...: total += x[t]``,
        sometimes reading the base, another view or an alias of it inside the body (NumPy's
        reads see earlier trips' writes: must be refused), the base read after the loop."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1
                           and v.dtype.kind in "fiub")
        if source is None:
            return None
        base, view, alias, t = self.fresh(), self.fresh(), self.fresh(), "i" + self.fresh()
        base_shape = self.rng.choice(["(3,) + {0}.shape[1:]", "{0}.shape[1:] + (2,)"]).format(
            source)
        pick = self.rng.choice([f"{base}[0]", f"{base}[1:]", f"{base}[::-1]", f"{base}[..., 0]",
                                f"{base}[-1]", f"{base}.T", f"{base}[:, ::-1]" if np.ndim(
                                    self.namespace[source]) > 1 else f"{base}[1:]"])
        row = f"{source}[{t}]"
        write = self.rng.choice([f"{view} += {row}", f"{view} *= 0.5", f"{view} -= {row} * {t}",
                                 f"{view}[...] = {view} * 0.5 + {row}",
                                 f"np.add({view}, {row}, out={view})",
                                 f"{view} += {row} * 0.5\n{view} *= 0.75"])
        read = self.rng.choice([None, None, f"{base}.sum()", f"{alias}[0].sum()",
                                f"{alias}.mean()", f"{view}.sum()", f"{base}[-1].max()"])
        lines = [f"{base} = np.zeros({base_shape})", f"{alias} = {base}", f"{view} = {pick}",
                 f"for {t} in range({source}.shape[0]):"]
        lines += ["    " + line for line in write.split("\n")]
        if read is not None:
            lines.append(f"    {view} += {read} * 0.125")
        defines = [base, view] if self.rng.random() < 0.7 else [base]
        return lines, "write-through loop", defines

    # --- round 22: drawn only under --focus (fixed seeds draw the programs they drew) ---
    def narrow_result(self):
        """A narrow integer result (``codegen/narrow_results.py``): a float clipped and cast
        to uint8 (image code's last line), a cast that wraps or leaves the range (NaN, 256.0:
        a side exit), a narrow buffer written in part, read back after a widening cast."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1)
        if source is None:
            return None
        narrow, wide = self.fresh(), self.fresh()
        dtype = self.rng.choice(["uint8", "int8", "int16", "uint16"])
        value = self.rng.choice([
            f"np.clip({source} * 255, 0, 255).astype(np.uint8)",
            f"({source} * 100).astype(np.{dtype})",
            f"{source}.astype(np.{dtype})",
            f"np.where({source} > 0, {source}, 0).astype(np.{dtype})",
            f"np.rint(np.clip({source}, -100, 100)).astype(np.{dtype})",
            f"({source} > 0).astype(np.{dtype})",
        ])
        lines = self.rng.choice([
            [f"{narrow} = {value}"],
            [f"{narrow} = np.zeros({source}.shape, np.uint8)",
             f"{narrow}[...] = np.clip({source} * 255, 0, 255).astype(np.uint8)"],
            [f"{narrow} = np.zeros({source}.shape, np.{dtype})",
             f"{narrow}[1:] = {value}[1:]"],
        ])
        lines = lines + [f"{wide} = {narrow}.astype(" + self.rng.choice(
            ["np.int32) * 2 - 1", "np.float32) / 255", "np.int64).sum()", "np.float64)"])]
        return lines, "narrow result", [narrow, wide] if self.rng.random() < 0.6 else [wide]

    def dict_carry(self):
        """A dict of parameters a loop carries with fixed keys (``loop_dict_carries``): a
        new dict per trip, entries updated in place, ``for k in p: p[k] -= ...``."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1
                           and v.dtype.kind == "f")
        if source is None:
            return None
        p, t, key, out = self.fresh(), "i" + self.fresh(), "k" + self.fresh(), self.fresh()
        bound = self.rng.choice([f"{source}.shape[0]", "3", "7", f"{source}.shape[0] - 1"])
        row = f"{source}[{t} % {source}.shape[0]]"
        body = self.rng.choice([
            [f"    {p} = {{'a': np.tanh({p}['a'] * 0.9 + {row}), 'b': {p}['b'] + "
             f"{p}['a'].sum() * 0.01}}"],
            [f"    {p}['a'] = {p}['a'] * 0.5 + {row}",
             f"    {p}['b'] -= 0.1 * {p}['a'].mean()"],
            [f"    for {key} in {p}:", f"        {p}[{key}] = {p}[{key}] * 0.9 + 0.1"],
            [f"    {p} = {{'a': {p}['a'] - 0.1 * ({p}['a'] - {row}), 'b': {p}['b']}}",
             f"    if {p}['a'].sum() > 0:", f"        {p}['b'] = {p}['b'] + 1.0"],
        ])
        lines = [f"{p} = {{'a': np.zeros({source}.shape[1:]), 'b': np.ones(1)}}",
                 f"for {t} in range({bound}):"] + body + [f"{out} = {p}['a'] * {p}['b']"]
        return lines, "dict carry", [p, out] if self.rng.random() < 0.5 else [out]

    def selected_append(self):
        """An append under a test of the loop index (``loop_selected_appends``): every k-th
        trip (k negative too), the last one, a cost recorded as a float."""
        source = self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= 1
                           and v.dtype.kind == "f")
        if source is None:
            return None
        h, costs, t, cost = self.fresh(), self.fresh(), "i" + self.fresh(), self.fresh()
        bound = self.rng.choice([f"{source}.shape[0]", "12", "40", "5"])
        test = self.rng.choice([f"{t} % {k} == {c}" for k in (1, 2, 3, -2, 10)
                                for c in (0, 1)] + [f"{t} == {bound} - 1", f"{t} > 2"])
        value = self.rng.choice([cost, f"{h}.copy()", f"{h}", f"{cost} * 2.0"])
        lines = [f"{h} = np.zeros({source}.shape[1:])", f"{costs} = []",
                 f"for {t} in range({bound}):",
                 f"    {h} = np.tanh({h} * 0.5 + {source}[{t} % {source}.shape[0]])",
                 f"    {cost} = float(np.sum({h} ** 2))",
                 f"    if {test}:", f"        {costs}.append({value})"]
        return lines, "selected append", [h, costs]

    # --- round 22e: drawn only under --focus (fixed seeds draw the programs they drew) ---
    def _array(self, kinds="fiub", ndim=1):
        return self.pick(lambda v: isinstance(v, np.ndarray) and v.ndim >= ndim
                         and v.dtype.kind in kinds)

    def reduction_keywords(self):
        """Reductions with tuples of axes, ``keepdims``, ``where=``, ``initial=`` and
        ``dtype=`` (float32 sums in float64, ints in float, a mask from the data)."""
        a = self._array(ndim=2)
        if a is None:
            return None
        out = self.fresh()
        reduction = self.rng.choice(["np.sum", "np.max", "np.min", "np.prod", "np.mean",
                                     "np.any", "np.all", "np.nansum", "np.std"])
        keywords = self.rng.choice([
            "axis=(0, 1)", "axis=(-1, 0), keepdims=True", "axis=(1,), keepdims=True",
            f"axis=0, where={a} > 0", f"axis=(0, 1), where={a} != 0, keepdims=True",
            "axis=1, initial=0", "axis=None, initial=-5", "axis=0, dtype=np.float64",
            "axis=-1, dtype=np.float32", "axis=(), keepdims=True", "axis=1, dtype=np.int64",
            f"where={a} > 0, initial=1", "axis=0, keepdims=True, dtype=np.float64"])
        return [f"{out} = {reduction}({a}, {keywords})"], "reduction keywords", [out]

    def einsum_string(self):
        """``np.einsum`` strings: traces, diagonals, transposes, outer and batched
        products, repeated and implicit output subscripts, ``optimize=``."""
        a = self._array("f", ndim=2)
        if a is None:
            return None
        b = self._array("f", ndim=1)
        out = self.fresh()
        spec = self.rng.choice([
            f"'ij->ji', {a}", f"'ij->', {a}", f"'ij->j', {a}", f"'ij,ij->i', {a}, {a}",
            f"'ij,kj->ik', {a}, {a}", f"'ij,ik->jk', {a}, {a}", f"'ij', {a}",
            f"'ji', {a}", f"'ij,ij', {a}, {a}", f"'...j->...', {a}",
            f"'ij,i->ij', {a}, {a}[:, 0]", f"'i,j->ij', {a}[0], {a}[:, 0]",
            f"'ii->i', {a}[:2, :2]", f"'ii', {a}[:2, :2]",
            f"'ij,jk->ik', {a}, {a}.T, optimize=True",
            f"'i,i->', {b}, {b}" if b else f"'i,i->', {a}[0], {a}[0]",
            f"'bi,bj->bij', {a}, {a}"])
        return [f"{out} = np.einsum({spec})"], "einsum string", [out]

    def window_view(self):
        """im2col by ``as_strided`` and ``sliding_window_view``, ``np.pad`` modes, and
        max pooling with an argmax mask (the backward's routing)."""
        a = self._array("fi", ndim=2)
        if a is None:
            return None
        out, cols, mask = self.fresh(), self.fresh(), self.fresh()
        choice = self.rng.choice([
            [f"{cols} = np.lib.stride_tricks.sliding_window_view({a}, (2, 2))",
             f"{out} = {cols}.reshape({cols}.shape[0], {cols}.shape[1], -1).max(axis=-1)"],
            [f"{cols} = np.lib.stride_tricks.sliding_window_view({a}, 2, axis=1)",
             f"{out} = {cols}.mean(axis=-1)"],
            [f"{cols} = np.lib.stride_tricks.sliding_window_view({a}, (2,), axis=(0,))[::2]",
             f"{out} = {cols}.sum(axis=-1)"],
            [f"{cols} = np.lib.stride_tricks.as_strided({a}, shape=({a}.shape[0] - 1, "
             f"{a}.shape[1] - 1, 2, 2), strides={a}.strides * 2, writeable=False)",
             f"{out} = {cols}.reshape({cols}.shape[0] * {cols}.shape[1], 4)"],
            [f"{out} = np.pad({a}, " + self.rng.choice([
                "1", "((1, 0), (0, 2))", "((1, 1), (2, 2)), mode='reflect'",
                "1, mode='edge'", "((0, 2), (1, 0)), mode='wrap'",
                "1, mode='symmetric'", "((1, 2), (0, 1)), constant_values=-1.5",
                "((1, 1), (1, 1)), mode='maximum'", "((2, 0), (0, 0)), mode='mean'",
                "((1, 1), (0, 0)), mode='linear_ramp', end_values=3"]) + ")"],
            [f"{cols} = {a}[:{a}.shape[0] // 2 * 2, :{a}.shape[1] // 2 * 2]",
             f"{cols} = {cols}.reshape({cols}.shape[0] // 2, 2, {cols}.shape[1] // 2, 2)",
             f"{out} = {cols}.max(axis=(1, 3))",
             f"{mask} = {cols} == {out}[:, None, :, None]",
             f"{out} = {mask} * {out}[:, None, :, None]"],
            [f"{cols} = {a}.reshape({a}.shape[0], -1)",
             f"{mask} = np.zeros_like({cols})",
             f"np.put_along_axis({mask}, np.argmax({cols}, axis=1)[:, None], 1, axis=1)",
             f"{out} = {mask} * {cols}"],
        ])
        return choice, "window view", [out]

    def index_call(self):
        """``np.take``/``take_along_axis``/``put_along_axis``, ``searchsorted``/
        ``digitize`` on sorted data, ``np.where`` broadcasting a column and a row."""
        a = self._array("fi", ndim=2)
        if a is None:
            return None
        out, index = self.fresh(), self.fresh()
        lines = self.rng.choice([
            [f"{out} = np.take({a}, [0, -1, 1], axis=1)"],
            [f"{out} = np.take({a}, np.argsort({a}[0])[:2], axis=1, mode='clip')"],
            [f"{out} = np.take({a}, [5, -7], mode='wrap')"],
            [f"{index} = np.argsort({a}, axis=1)",
             f"{out} = np.take_along_axis({a}, {index}, axis=1)"],
            [f"{index} = np.argmax({a}, axis=0)[None]",
             f"{out} = np.take_along_axis({a}, {index}, axis=0)"],
            [f"{out} = {a}.copy()",
             f"np.put_along_axis({out}, np.argmin({a}, axis=1)[:, None], 0, axis=1)"],
            [f"{index} = np.sort({a}[0])",
             f"{out} = np.searchsorted({index}, {a}[-1], side="
             + self.rng.choice(["'left')", "'right')"])],
            [f"{out} = np.digitize({a}, np.array([-1.0, 0.0, 0.5, 2.0]), right="
             + self.rng.choice(["True)", "False)"])],
            [f"{out} = np.digitize({a}[0], np.array([3.0, 1.0, 0.0]))"],
            [f"{out} = np.where({a}[:, :1] > 0, {a}[:1, :], -{a})"],
            [f"{out} = np.where({a} > 0, 1, 0.5)"],
            [f"{out} = np.where({a}[0] > {a}[-1], {a}, np.float32(2))"],
        ])
        return lines, "index call", [out]

    def bool_reduction(self):
        """``any``/``all`` over empty slices, axes of length 0, NaN (truthy)."""
        a = self._array(ndim=1)
        if a is None:
            return None
        out = self.fresh()
        value = self.rng.choice([
            f"np.all({a}[:0])", f"np.any({a}[:0], axis=0)", f"np.all({a}[:0], axis=-1)",
            f"np.any({a} != {a})", f"np.all({a}.astype(bool), axis=0, keepdims=True)",
            f"np.any(np.isnan({a}), axis=-1)", f"({a}[..., :0] > 0).all(axis=-1)",
            f"np.logical_and.reduce({a} > 0, axis=0)", f"np.count_nonzero({a}, axis=0)",
            f"bool(np.all({a} == {a}))"])
        return [f"{out} = {value}"], "bool reduction", [out]

    def integer_op(self):
        """Integer ops in int8..uint64: floor_divide and remainder with negative operands
        and zero divisors, powers of negative bases, shifts past the width, bitwise."""
        a = self._array("iub")
        if a is None:
            a = self._array("f")
            if a is None:
                return None
        dtype = self.rng.choice(["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                 "int64", "uint64"])
        x, out = self.fresh(), self.fresh()
        op = self.rng.choice([
            f"{x} // np.{dtype}(3)", f"{x} % np.{dtype}(3)", f"np.floor_divide({x}, {x}[::-1])",
            f"np.remainder({x}, {x}[::-1])", f"{x} ** 2", f"np.power({x}, 3)",
            f"{x} << np.{dtype}(3)", f"{x} >> np.{dtype}(1)", f"({x} & 5) ^ ({x} | 3)",
            f"~{x}", f"np.left_shift({x}, {x} % 9)", f"{x} // -2" if "u" not in dtype
            else f"{x} // 2", f"np.divmod({x}, np.{dtype}(7))[1]", f"{x} * {x}",
            f"-{x}", f"np.abs({x})", f"{x} - np.{dtype}(200)"])
        return ([f"{x} = ({a} * 37 - 11).astype(np.{dtype})", f"{out} = {op}"],
                "integer op", [out])

    def rounding_edge(self):
        """``np.round``/``rint``/``floor``/``ceil``/``trunc`` on .5 ties, negative ties,
        decimals and values past 2**52 / 2**23."""
        a = self._array("f")
        if a is None:
            return None
        x, out = self.fresh(), self.fresh()
        make = self.rng.choice([f"{a} * 0 + np.arange({a}.shape[-1]) - 2.5",
                                f"np.floor({a} * 4) / 2 + 0.5", f"{a} * 1e17",
                                f"{a} * 0 + 2.0 ** 52 + 0.5", f"{a} * 1e7",
                                f"({a} * 0 + 0.5).astype(np.float32) * 3",
                                f"{a} * 0 + 16777217.0"])
        op = self.rng.choice(["np.round({0})", "np.round({0}, 1)", "np.round({0}, -1)",
                              "np.rint({0})", "np.floor({0})", "np.ceil({0})",
                              "np.trunc({0})", "np.around({0}, 2)", "{0}.round()",
                              "np.fix({0})", "np.floor({0}).astype(np.int64)"])
        return [f"{x} = {make}", f"{out} = {op.format(x)}"], "rounding edge", [out]

    def scalar_promotion(self):
        """NEP 50: an array with a Python float/int stays its dtype, with a NumPy scalar it
        promotes (float32 + np.float64(1) is float64); int8 + 300 raises, uint8 - 1 wraps."""
        a = self._array("fiub")
        if a is None:
            return None
        out = self.fresh()
        dtype = self.rng.choice(["float32", "int8", "uint8", "int32", "float64", "uint16"])
        other = self.rng.choice(["1.5", "3", "np.float64(1.5)", "np.float32(2.5)",
                                 "np.int64(3)", "np.int8(-2)", "np.uint8(200)", "True",
                                 "300", "-1", "2**40", "np.float16(0.5)", "1e40"])
        op = self.rng.choice(["+", "*", "-", "/", "//", "**", "<", "%"])
        value = self.rng.choice([f"{a}.astype(np.{dtype}) {op} {other}",
                                 f"{other} {op} {a}.astype(np.{dtype})",
                                 f"np.{dtype}({a}.flat[0]) {op} {other}",
                                 f"np.maximum({a}.astype(np.{dtype}), {other})"])
        return [f"{out} = {value}"], "scalar promotion", [out]

    def aliased_returns(self, defined):
        """Extra results that alias others: one value twice, a view and its base, an
        argument and views of it (after in-place updates, too)."""
        arrays = [name for name in defined + list(self.program.params)
                  if isinstance(self.namespace.get(name), np.ndarray)
                  and self.namespace[name].ndim >= 1]
        extras = []
        for _ in range(int(self.rng.integers(1, 4))):
            if not arrays:
                break
            name = self.rng.choice(arrays)
            extras.append(self.rng.choice([name, f"{name}[1:]", f"{name}[::-1]", f"{name}.T",
                                           f"{name}[...]", f"{name}.reshape(-1)",
                                           f"{name}[:]", f"np.asarray({name})"]))
        return extras

    def draw(self, statements):
        makers = [self.simple] * 10 + [self.branch] * 2 + [self.row_loop] * 2 + [
            self.matmul_loop, self.column_loop, self.while_loop, self.mask_write,
            self.argument_write, self.python_number, self.gather] + [
            self.dynamic_loop] * 3 + [self.view_write] * 3 + [self.inplace_argument] * 2 + [
            self.data_branch] * 2 + [self.view_loop] * 2 + [self.filled_loop] * 3 + [
            self.offset_loops] * 2 + [self.carried_scan] * 2 + [
            self.exit_loop] * 3 + [self.random_draw] * 2 + [self.write_through_loop] * 2 + [
            self.exit_forms] * 3
        if FOCUS:  # --focus: mostly the named kinds (round 22's only when named)
            makers += [self.narrow_result, self.dict_carry, self.selected_append,
                       self.reduction_keywords, self.einsum_string, self.window_view,
                       self.index_call, self.bool_reduction, self.integer_op,
                       self.rounding_edge, self.scalar_promotion]
            makers = [maker for maker in makers if maker.__name__ in FOCUS] * 6 + makers
        attempts = 0
        while len(self.program.statements) < statements and attempts < statements * 6:
            attempts += 1
            made = self.rng.choice(makers)()
            if made is None:
                continue
            lines, kind, defines = made
            self.try_add(lines, kind, defines)
        defined = [name for name in self.names if name not in self.program.params]
        self.program.returns = defined or list(self.program.params[:1])
        if self.rng.random() < 0.4:
            self.program.returns += self.aliased_returns(defined)
        self.program.as_dict = self.rng.random() < 0.15
        return self.program


def draw_family(table, seed, families=None):
    """A program from one of ``table``'s generator families (``{name: make(rng)}``), chosen
    by ``seed`` among ``families`` (all by default): fuzz23/24/25's ``draw``."""
    rng = Chooser(seed)
    names = list(families or table)
    return table[rng.choice(names)](rng)


def draw_program(seed):
    rng = Chooser(seed)
    params = draw_params(rng)
    probe = make_arguments(params, PROBE, seed, special=False)
    builder = Builder(rng, params, probe)
    program = builder.draw(int(rng.integers(3, 13)))
    sets = []
    for call in range(4):  # the probe's shapes: the trace, then compiled code
        sets.append(("same", dict(PROBE), seed * 7 + call, call == 3 and rng.random() < 0.5))
    for number in range(int(rng.integers(2, 5))):
        sizes = {dim: int(rng.choice(SIZES)) for dim in "nmk"}
        for repeat in range(2):
            sets.append(("sizes", sizes, seed * 7 + 10 + number * 2 + repeat,
                         bool(rng.random() < 0.4)))
    if rng.random() < 0.4:  # a walk through one bucket, then its neighbours (n only)
        sizes = dict(sets[-1][1])
        for length in rng.choice([(9, 12, 16, 10), (5, 6, 7, 8), (2, 3, 4, 1, 0),
                                  (17, 31, 32, 33)]):
            sizes = dict(sizes, n=length)
            sets.append(("walk", sizes, seed * 7 + 40 + length, bool(rng.random() < 0.3)))
    dynamic = rng.choice(["auto", "auto", True])
    return program, params, sets, dynamic


class Chooser:
    """A NumPy generator whose ``choice`` returns list items as they are (not as NumPy
    scalars or strings)."""

    def __init__(self, seed):
        self.generator = np.random.default_rng(seed)

    def choice(self, options):
        return options[int(self.generator.integers(0, len(options)))]

    def random(self):
        return self.generator.random()

    def integers(self, low, high):
        return self.generator.integers(low, high)


# --- comparing -----------------------------------------------------------------------------
def scale_of(values, arguments):
    biggest, count = 1.0, 1
    for value in list(values) + list(arguments):
        array = np.asarray(value) if isinstance(value, (np.ndarray, np.generic, float,
                                                         int)) else None
        if array is None or array.dtype.kind not in "fiub":
            continue
        count = max(count, array.size)
        finite = np.abs(array[np.isfinite(array)].astype(np.float64)) if array.size else []
        if len(finite):
            biggest = max(biggest, float(np.max(finite)))
    return biggest, count


def leaves(tree):
    if isinstance(tree, dict):
        return [leaf for key in tree for leaf in leaves(tree[key])]
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in leaves(item)]
    return [tree]


def structure(tree):
    if isinstance(tree, dict):
        return ("dict", tuple((key, structure(tree[key])) for key in tree))
    if isinstance(tree, (tuple, list)):
        return (type(tree).__name__, tuple(structure(item) for item in tree))
    return type(tree).__name__


def difference(got, want, scale, count, float32):
    """None, or text naming the first difference."""
    if structure(got) != structure(want):
        return f"structure {structure(got)} != {structure(want)}"
    for index, (g, w) in enumerate(zip(leaves(got), leaves(want))):
        if type(g) is not type(w):
            return f"leaf {index}: type {type(g).__name__} != {type(w).__name__}"
        if isinstance(w, (np.ndarray, np.generic)):
            if g.dtype != w.dtype or np.shape(g) != np.shape(w):
                return f"leaf {index}: {g.dtype}{np.shape(g)} != {w.dtype}{np.shape(w)}"
            if isinstance(w, np.ndarray) and w.flags.writeable != g.flags.writeable \
                    and not (w.base is not None and g.base is not None):
                pass
            ga, wa = np.asarray(g), np.asarray(w)
            if wa.dtype.kind in "fc":
                rtol = RTOL["f4"] if (float32 or wa.dtype == np.float32) else RTOL["f8"]
                if wa.dtype == np.float16:
                    rtol = RTOL["f2"]
                atol = rtol * scale * count
                with np.errstate(all="ignore"):
                    close = np.isclose(ga, wa, rtol=rtol, atol=atol, equal_nan=True)
                # infinities must agree in sign; NaN with NaN
                if not np.all(close):
                    bad = np.argwhere(~np.asarray(close))
                    where = tuple(int(i) for i in bad[0]) if bad.size else ()
                    return (f"leaf {index}: values differ at {where}: {ga[where]!r} != "
                            f"{wa[where]!r} ({int((~close).sum())} of {wa.size})")
            elif not np.array_equal(ga, wa):
                bad = np.argwhere(ga != wa)
                where = tuple(int(i) for i in bad[0]) if bad.size else ()
                return f"leaf {index}: values differ at {where}: {ga[where]!r} != {wa[where]!r}"
        elif isinstance(w, float):
            if not (np.isclose(g, w, rtol=1e-4 if float32 else 1e-9,
                               atol=1e-9 * scale * count, equal_nan=True)):
                return f"leaf {index}: {g!r} != {w!r}"
        elif g != w:
            return f"leaf {index}: {g!r} != {w!r}"
    return None


def relations(results, arguments):
    """``is``, ``np.shares_memory`` and the writeable flag of each pair of result arrays
    and of each result array with each argument array (``tracer/result_identity.py``)."""
    results = [leaf for leaf in leaves(results) if type(leaf) is np.ndarray]
    arguments = [leaf for leaf in leaves(arguments) if type(leaf) is np.ndarray]
    pairs = [(a, b) for i, a in enumerate(results) for b in results[i + 1:]]
    pairs += [(a, b) for a in results for b in arguments]
    return [(a is b, bool(np.shares_memory(a, b)), a.flags.writeable) for a, b in pairs]


def run_one(function, source, params, sets, dynamic):
    """Eager vs jit over ``sets``. Returns None or (kind, text)."""
    import tracejit as tj

    compiled = tj.jit(function, cache="memory", dynamic=dynamic)
    float32 = any(param.dtype == "f4" for param in params) or "float32" in source
    for number, (_label, sizes, seed, special) in enumerate(sets):
        arguments = make_arguments(params, sizes, seed, special)
        eager_arguments, jit_arguments = copy_arguments(arguments), copy_arguments(arguments)
        eager_error = jit_error = None
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.random.seed(seed % 2**32)  # draws in the program: both sides start alike
            try:
                want = function(*eager_arguments)
            except Exception as error:  # noqa: BLE001 - eager's exception is the contract
                eager_error = error
            eager_state = legacy_state()
            np.random.seed(seed % 2**32)
            try:
                got = compiled(*jit_arguments)
            except Exception as error:  # noqa: BLE001
                jit_error = error
        where = f"argument set {number} (sizes {sizes}, special={special})"
        if legacy_state() != eager_state:
            return "random state differs", f"{where}: np.random's state after the call"
        if eager_error is not None or jit_error is not None:
            problem = exception_difference(where, eager_error, jit_error)
            if problem:
                return problem
            continue
        scale, count = scale_of(leaves(want), arguments)
        count += max(sizes.values())
        problem = difference(got, want, scale, count, float32)
        if problem:
            return "result differs", f"{where}: {problem}"
        problem = difference(jit_arguments, eager_arguments, scale, count, float32)
        if problem:
            return "arguments differ", f"{where}: arguments afterwards: {problem}"
        if not CHECK_IDENTITY:
            continue
        got_relations = relations(got, jit_arguments)
        want_relations = relations(want, eager_arguments)
        if got_relations != want_relations:
            bad = next(n for n, (g, w) in enumerate(zip(got_relations, want_relations))
                       if g != w)
            return "identity differs", (f"{where}: results and arguments (is, shares memory, "
                                        f"writeable), pair {bad}: {got_relations[bad]} != "
                                        f"{want_relations[bad]}")
    reasons = compiled.stats().get("eager_calls") or {}
    details = repr(compiled.stats().get("eager_reasons"))
    for reason in reasons:
        # narrow dtypes (bool ** 2 is int8, tanh of a bool float16): a stated refusal
        refused = "compiled code computes in" in details or "compiled code supports" in details
        if "internal error" in reason or ("not compiled" in reason and not refused):
            return "internal error", f"{reason}: {compiled.explain()[-3000:]}"
    return None


def exception_difference(where, eager_error, jit_error):
    """None where both raised the same type of exception, else (kind, text)."""
    if eager_error is None:
        return "jit raised", (f"{where}: {type(jit_error).__name__}: {jit_error}\n"
                              + "".join(traceback.format_exception(jit_error))[-3000:])
    if jit_error is None:
        return "jit did not raise", (f"{where}: eager raised "
                                     f"{type(eager_error).__name__}: {eager_error}")
    if not isinstance(jit_error, type(eager_error)):
        return "other exception", (f"{where}: eager {type(eager_error).__name__}: "
                                   f"{eager_error}; jit {type(jit_error).__name__}: "
                                   f"{jit_error}")
    return None


def legacy_state():
    """``np.random``'s global state as a comparable tuple."""
    name, key, position, has_gauss, gauss = np.random.get_state()
    return name, key.tobytes(), position, has_gauss, gauss


# --- minimizing ----------------------------------------------------------------------------
def still_fails(program, params, sets, dynamic, kind):
    try:
        function = load(program.source())
        result = run_one(function, program.source(), params, sets, dynamic)
    except Exception:  # noqa: BLE001
        return False
    return result is not None and result[0] == kind


def minimize(program, params, sets, dynamic, kind):
    program = copy.deepcopy(program)
    # Argument sets: keep the shortest prefix that fails, then drop single sets.
    changed = True
    while changed:
        changed = False
        for index in range(len(program.statements) - 1, -1, -1):
            trial = copy.deepcopy(program)
            del trial.statements[index]
            if still_fails(trial, params, sets, dynamic, kind):
                program, changed = trial, True
        for index in range(len(program.returns) - 1, -1, -1):
            trial = copy.deepcopy(program)
            del trial.returns[index]
            if still_fails(trial, params, sets, dynamic, kind):
                program, changed = trial, True
        for index in range(len(sets) - 1, -1, -1):
            trial_sets = sets[:index] + sets[index + 1:]
            if trial_sets and still_fails(program, params, trial_sets, dynamic, kind):
                sets, changed = trial_sets, True
    return program, sets


def reproducer(program, params, sets, dynamic, kind, text):
    param_text = repr([(p.name, p.dims, p.dtype, p.layout) for p in params])
    return (f'"""Fuzz finding: {kind}\n\n{text[:1500]}\n"""\n'
            "import sys\nsys.path.insert(0, 'tests/differential')\n"
            "import fuzz\nimport numpy as np\n\n"
            f"SOURCE = '''\\\n{program.source()}'''\n"
            f"PARAMS = [fuzz.Param(*p) for p in {param_text}]\n"
            f"SETS = {sets!r}\n"
            f"program = fuzz.load(SOURCE)\n"
            f"print(fuzz.run_one(program, SOURCE, PARAMS, SETS, {dynamic!r}))\n")


# --- driving -------------------------------------------------------------------------------
def worker(args):
    import logging

    logging.getLogger("tracejit").setLevel(logging.CRITICAL)  # eager reasons: not findings
    logging.getLogger("tracejit").propagate = False
    os.makedirs(args.out, exist_ok=True)
    deadline = time.time() + args.minutes * 60
    seed = args.seed
    counts = {"programs": 0, "findings": 0, "statements": 0}
    seen = set()
    if os.path.exists(os.path.join(args.out, "seen.json")):
        seen = set(json.load(open(os.path.join(args.out, "seen.json"))))
    while time.time() < deadline:
        seed += 1
        program, params, sets, dynamic = draw_program(seed)
        with open(os.path.join(args.out, "current.py"), "w") as file:
            file.write(reproducer(program, params, sets, dynamic, "native crash",
                                  f"seed {seed}"))
        try:
            function = load(program.source())
            with time_limit(300):  # a loop that never ends at some size: noted, not waited on
                result = run_one(function, program.source(), params, sets, dynamic)
        except Exception as error:  # noqa: BLE001 - the fuzzer's own trouble, noted
            result = ("fuzzer error", repr(error))
        counts["programs"] += 1
        counts["statements"] += len(program.statements)
        if result is not None:
            kind, text = result
            small, small_sets = minimize(program, params, sets, dynamic, kind) \
                if kind != "fuzzer error" else (program, sets)
            key = hashlib.sha1((kind + small.source()).encode()).hexdigest()[:10]
            if key not in seen:
                seen.add(key)
                counts["findings"] += 1
                path = os.path.join(args.out, f"finding-{key}.py")
                with open(path, "w") as file:
                    file.write(reproducer(small, params, small_sets, dynamic, kind, text))
                print(f"[seed {seed}] {kind}: {path}\n{small.source()}{text[:400]}\n",
                      flush=True)
                json.dump(sorted(seen), open(os.path.join(args.out, "seen.json"), "w"))
        with open(os.path.join(args.out, "progress.json"), "w") as file:
            json.dump(dict(counts, seed=seed), file)
    print(f"done: {counts}", flush=True)


def parent(args):
    """Runs the worker, restarting it (with a later seed) when it dies."""
    os.makedirs(args.out, exist_ok=True)
    deadline = time.time() + args.minutes * 60
    seed, restarts = args.seed, 0
    total = 0
    while time.time() < deadline:
        # A fresh worker every few minutes runs the tree's latest fixes.
        minutes = min((deadline - time.time()) / 60, args.restart_minutes)
        command = [sys.executable, __file__, "--worker", "--minutes", f"{minutes:.2f}",
                   "--seed", str(seed), "--out", args.out]
        result = subprocess.run(command)
        progress = json.load(open(os.path.join(args.out, "progress.json"))) \
            if os.path.exists(os.path.join(args.out, "progress.json")) else {"seed": seed}
        total += progress.get("programs", 0)
        if result.returncode != 0:
            restarts += 1
            crash = os.path.join(args.out, f"crash-{progress['seed'] + 1}.py")
            os.replace(os.path.join(args.out, "current.py"), crash)
            print(f"worker died ({result.returncode}): {crash}", flush=True)
        seed = progress.get("seed", seed) + 1
    print(f"fuzz finished: about {total} programs, {restarts} worker deaths", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="/tmp/tracejit-fuzz")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--restart-minutes", type=float, default=8)
    parser.add_argument("--show", type=int, help="print the program of this seed and exit")
    parser.add_argument("--values-only", action="store_true",
                        help="compare values, not the results' identities and sharing")
    parser.add_argument("--focus", default="",
                        help="mostly these statement kinds (Builder method names, comma "
                             "separated: exit_loop,random_draw,write_through_loop)")
    args = parser.parse_args()
    if args.focus:  # the worker processes read it from the environment
        os.environ["FUZZ_FOCUS"] = args.focus
        FOCUS[:] = args.focus.split(",")
    if args.values_only:  # the worker processes read it from the environment
        os.environ["FUZZ_VALUES_ONLY"] = "1"
        global CHECK_IDENTITY
        CHECK_IDENTITY = False
    if args.show is not None:
        program, params, sets, dynamic = draw_program(args.show)
        print(program.source(), params, sets, dynamic)
        return
    (worker if args.worker else parent)(args)


if __name__ == "__main__":
    main()
