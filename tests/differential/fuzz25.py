"""Round 25's generators: what rounds 23 and 24 never wrote - loops that skip and leave on
data, triangular nests, lists stacked after a loop, dict state, writes through views of
carried buffers, integer edges, NaN through selections, ties and running reductions, and
call sequences that flip guards.

Beside ``fuzz23.py`` and ``fuzz24.py`` (whose ``Drawn``, ``layout``, ``data`` and checks
these reuse), each family writes a whole small function with its own argument maker::

    program = draw(seed)               # a Drawn: source, family, make(call) -> arguments
    print(program.source)
    problem = check(program)           # None, or (kind, text) as fuzz.run_one says

Families (``FAMILIES``):

* ``skip_loops``: ``while`` and ``for`` loops with ``continue`` and ``break`` on data (a
  row's sign, a running total, a NaN), with counters of each path returned exactly;
* ``triangular``: nested loops whose inner trip count depends on the outer index
  (``range(i)``, ``range(i, n)``, ``range(i + 1)``, ``range(n - i)``), writing a buffer at
  ``[i, j]`` and accumulating;
* ``stacked_lists``: a loop appending arrays (rows, slices, scalars) to one or two lists,
  then ``np.stack`` / ``np.concatenate`` / ``np.array`` / ``np.vstack`` / ``sum`` of them,
  zero trips included (NumPy raises on an empty stack: the same exception expected);
* ``dict_state``: a dict of state (arrays, a Python float, an int) updated in a loop by
  key, read back, entries added in the loop;
* ``carried_views``: a buffer carried by a loop written through a view of it (``v =
  buf[i]; v += ...``, ``buf[:, i:i+1] *= ...``, ``np.add(v, 1, out=v)``, a reversed view);
* ``int_edges``: int8/int16/int32/int64/uint8 arrays through wrapping arithmetic
  (``a * 100``, ``a + 120``, ``-a`` of the minimum, ``np.abs``), division and modulo by
  arrays with zeros (NumPy gives 0 and warns), shifts, ``np.cumsum`` past the range;
* ``nan_select``: ``np.where`` / ``np.select`` / ``np.clip`` / ``np.piecewise``-like chains
  with NaN in the condition's operands, the choices, the bounds (``np.clip(a, nan, 1)``);
* ``ties``: ``argmax`` / ``argmin`` / ``argsort`` / ``unique`` / ``sort`` on data with many
  ties (small ints, rounded floats, -0.0 beside 0.0), ``cumsum`` / ``cumprod`` along axes,
  ``einsum`` in several spellings;
* ``grad_loops``: losses of Tensors through loops with ``continue``/``break``, rows
  appended then stacked, triangular nests, dict state, ``cumsum``/``cumprod``/``einsum``,
  differentiated as ``fuzz24.check_grad`` does;
* ``guard_flip``: one function with branches on data and shapes, called with inputs that
  take each branch in turn and sizes 0/1/primes alternating, prints compared too.

Run offline::

    nice -n 10 .venv/bin/python tests/differential/fuzz25.py --minutes 10 --seed 1

``test_fuzz_findings25.py`` runs a bounded, seeded sample in CI.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import fuzz  # noqa: E402 - beside this file, not a package
import fuzz23  # noqa: E402
import fuzz24  # noqa: E402
from fuzz23 import Drawn, data, layout  # noqa: E402
from fuzz24 import LAYOUTS, _source  # noqa: E402


def _indent(lines, pad="    "):
    return [pad + line for line in lines]


def _matrix_maker(rng, dtype, calls_shapes, with_n=True, specials=0.1, n_values=None):
    """``make(call)`` giving ``(x, n)`` (or ``(x,)``): ``x`` of ``dtype`` in the call's
    shape and layout, ``n`` an int trip count (0, 1 and primes among them)."""
    seed = int(rng.integers(0, 2**31))
    counts = n_values or [int(rng.choice((0, 1, 2, 3, 5, 7, 11))) for _ in range(5)]

    def make(call):
        local = np.random.default_rng(seed + call)
        shape = calls_shapes[0] if call < 3 else calls_shapes[call % len(calls_shapes)]
        x = layout(data(local, shape, dtype, specials if call % 4 == 3 else 0.0),
                   LAYOUTS[call % 4])
        return (x, counts[call % len(counts)]) if with_n else (x,)

    return make


def _shapes(rng, first=(3, 5), rows=(1, 2, 3, 5, 7), cols=(1, 2, 3, 5)):
    shapes = [(int(rng.choice(first)), int(rng.choice((2, 3))))]
    return shapes + [(int(rng.choice(rows)), int(rng.choice(cols))) for _ in range(3)]


# --- while/for with continue and break on data ----------------------------------------------
def skip_loops(rng):
    dtype = rng.choice(["float64", "float32"])
    form = rng.choice(["for", "while", "while_true", "for_range_len"])
    skip = rng.choice(["row.sum() < 0", "row[0] > 0", "np.isnan(row).any()", "i % 2 == 1",
                       "float(row.max()) > 1.0", "total > 2.0"])
    stop = rng.choice(["total > 4.0", "np.isnan(h).any()", "kept >= 3", "h.max() > 1.5",
                       "skipped > 2", "abs(total) > 1e3"])
    step = rng.choice(["h = h * 0.5 + row", "h = np.maximum(h, row)", "h = np.tanh(h + row)",
                       "h = h + row * (i + 1)"])
    total = rng.choice(["total += float(row.sum())", "total += float(np.abs(h).sum())",
                        "total = total * 0.5 + float(h[0])"])
    body_skip = [f"if {skip}:", "    skipped += 1"] + (
        ["    i += 1"] if form.startswith("while") else []) + ["    continue"]
    body = ["row = x[i % len(x)]"] + body_skip + [step, total, "kept += 1",
                                                   f"if {stop}:", "    break"]
    start = ["h = np.zeros(x.shape[1], x.dtype)", "total = 0.0", "kept = 0", "skipped = 0"]
    if form == "for":
        lines = start + ["for i in range(n):"] + _indent(body)
    elif form == "for_range_len":
        body[0] = "row = x[i]"
        lines = start + ["for i in range(len(x)):"] + _indent(body)
    elif form == "while":
        lines = start + ["i = 0", "while i < n:"] + _indent(body + ["i += 1"])
    else:
        lines = start + ["i = 0", "while True:", "    if i >= n:", "        break"] + \
            _indent(body + ["i += 1"])
    lines.append(rng.choice(["return h, total, kept, skipped",
                             "return h.sum(), kept - skipped, total"]))
    params = "x" if form == "for_range_len" else "x, n"
    make = _matrix_maker(rng, dtype, _shapes(rng), with_n=form != "for_range_len")
    return Drawn("skip_loops", _source(params, lines), make, calls=10,
                 float32=dtype == "float32")


# --- triangular nests -------------------------------------------------------------------------
def triangular(rng):
    dtype = rng.choice(["float64", "float32"])
    inner = rng.choice(["range(i)", "range(i, n)", "range(i + 1)", "range(n - i)",
                        "range(1, i + 1)", "range(i, n, 2)"])
    write = rng.choice(["out[i, j] = x[i % len(x)] @ x[j % len(x)]",
                        "out[i, j] += 1.0", "out[j, i] = out[i, j] + i - j",
                        "out[i, j % n] = acc", "out[i] += x[j % len(x)].sum()"])
    extra = rng.choice(["acc = acc * 0.5 + float(x[(i + j) % len(x), 0])",
                        "acc += 1", "acc = acc + np.tanh(x[j % len(x)]).sum()",
                        "trips += 1"])
    lines = ["out = np.zeros((n, n), x.dtype)", "acc = 0.0", "trips = 0",
             "for i in range(n):", f"    for j in {inner}:", f"        {extra}",
             f"        {write}"]
    if rng.random() < 0.3:
        lines += ["    if acc > 3:", "        acc = 0.0"]
    lines.append("return out, acc, trips")
    make = _matrix_maker(rng, dtype, _shapes(rng), n_values=[
        int(rng.choice((0, 1, 2, 3, 4, 5, 7))) for _ in range(6)])
    return Drawn("triangular", _source("x, n", lines), make, calls=9,
                 float32=dtype == "float32")


# --- lists appended in a loop, then stacked ---------------------------------------------------
def stacked_lists(rng):
    dtype = rng.choice(["float64", "float32"])
    item = rng.choice(["x[i % len(x)]", "x[i % len(x)] * i", "np.tanh(h)", "h.copy()",
                       "x[i % len(x), :2]", "h[None]", "float(h.sum())", "h.sum()",
                       "x[i % len(x)] > 0", "np.asarray(i)"])
    combine = rng.choice(["np.stack(items)", "np.stack(items, axis=-1)", "np.array(items)",
                          "np.concatenate(items)", "np.vstack(items)", "np.hstack(items)",
                          "sum(items)", "np.stack(items).mean(axis=0)", "len(items)",
                          "np.asarray(items)", "np.stack(items[::-1])",
                          "np.concatenate([np.atleast_1d(t) for t in items])"])
    guard = rng.choice(["", "if row.sum() > 0:", "if i % 2 == 0:"])
    lines = ["h = np.zeros(x.shape[1], x.dtype)", "items = []", "others = []",
             "for i in range(n):", "    row = x[i % len(x)]", "    h = h * 0.5 + row"]
    if guard:
        lines += [f"    {guard}", f"        items.append({item})"]
    else:
        lines.append(f"    items.append({item})")
    if rng.random() < 0.4:
        lines.append("    others.append(i)")
    lines += [f"out = {combine}", "return out, h, others"]
    make = _matrix_maker(rng, dtype, _shapes(rng), specials=0.0, n_values=[
        int(rng.choice((1, 2, 3, 4, 5, 7, 0))) for _ in range(6)])
    return Drawn("stacked_lists", _source("x, n", lines), make, calls=9,
                 float32=dtype == "float32")


# --- dict state -------------------------------------------------------------------------------
def dict_state(rng):
    dtype = rng.choice(["float64", "float32"])
    updates = [
        rng.choice(['state["h"] = np.tanh(state["h"] * 0.5 + row)',
                    'state["h"] += row', 'state["h"] = np.maximum(state["h"], row)']),
        rng.choice(['state["count"] += 1', 'state["count"] += int(row.sum() > 0)',
                    'state["count"] = state["count"] * 2 % 5']),
        rng.choice(['state["loss"] += float((row ** 2).sum())',
                    'state["loss"] = state["loss"] * 0.9 + float(row[0])']),
        rng.choice(['state[i] = row.sum()', 'state["last"] = row',
                    'state.setdefault("first", row.copy())',
                    'state["m"] = state.get("m", 0) + row']),
    ]
    if rng.random() < 0.4:
        updates.append(rng.choice(['if state["loss"] > 2:', 'if row[0] > 0:']))
        updates.append('    state["h"] = state["h"] * 0.5')
    lines = ['state = {"h": np.zeros(x.shape[1], x.dtype), "count": 0, "loss": 0.0}',
             "for i in range(n):", "    row = x[i % len(x)]"] + _indent(updates)
    lines.append(rng.choice(["return state", 'return state["h"], state["count"], state',
                             "return sorted(map(str, state)), state[\"loss\"]"]))
    make = _matrix_maker(rng, dtype, _shapes(rng))
    return Drawn("dict_state", _source("x, n", lines), make, calls=9,
                 float32=dtype == "float32")


# --- writes through views of carried buffers --------------------------------------------------
def carried_views(rng):
    dtype = rng.choice(["float64", "float32"])
    view = rng.choice(["buf[i]", "buf[:, i % buf.shape[1]]", "buf[i, ::-1]", "buf[i:i + 1]",
                       "buf[::-1][i]", "buf.T[i % buf.shape[1]]", "buf[i][1:]",
                       "buf.reshape(-1)[i:i + 2]"])
    write = rng.choice(["v += row.sum()", "v *= 0.5", "v[...] = np.tanh(v + 1)",
                        "np.add(v, 1, out=v)", "v -= v.mean() if v.size else 0",
                        "v[v > 0] = 0", "np.copyto(v, v * 2 + 1)", "v[:1] = i"])
    lines = ["buf = np.zeros((n + 1, x.shape[1]), x.dtype) + x[0]",
             "for i in range(n):", "    row = x[i % len(x)]", f"    v = {view}",
             f"    {write}"]
    if rng.random() < 0.5:
        lines.append(rng.choice(["    buf = buf * 0.9", "    buf[i + 1] += buf[i]",
                                 "    buf[-1] = v.sum()"]))
    lines.append(rng.choice(["return buf", "return buf, v", "return buf.sum(axis=0)"]))
    make = _matrix_maker(rng, dtype, _shapes(rng), n_values=[
        int(rng.choice((0, 1, 2, 3, 5, 7))) for _ in range(5)])
    return Drawn("carried_views", _source("x, n", lines), make, calls=9,
                 float32=dtype == "float32")


# --- integer edges ----------------------------------------------------------------------------
INT_OPS = [
    "a * 100", "a + 120", "-a", "np.abs(a)", "a * a * a", "a // b", "a % b", "b // a",
    "np.floor_divide(a, b)", "np.remainder(a, b)", "np.fmod(a, b)", "np.divmod(a, b)[1]",
    "a << 3", "a >> 1", "np.left_shift(a, 7)", "np.cumsum(a * 50, axis=0)",
    "np.cumprod(a + 2, axis=-1)", "a.sum(axis=0)", "np.prod(a, axis=0)", "a - b * 127",
    "np.negative(a)", "np.minimum(a, b) * 3", "a ** 2", "np.sign(a) * a", "a // 0",
    "a % 0", "np.maximum(a, b) // np.minimum(a, b)", "a * np.int64(2**40)",
    "np.int8(100) + a.astype(np.int8)", "(a + b) // 2", "np.true_divide(a, b)",
]


def int_edges(rng):
    dtype = rng.choice(["int8", "int16", "int32", "int64", "uint8", "int32", "int64"])
    op = rng.choice(INT_OPS)
    extra = rng.choice(["", "out = out + 1", "out = out.astype(np.int64)", "out = out > 0"])
    lines = [f"out = {op}"] + ([extra] if extra else [])
    source = fuzz23._one_result("a, b", lines,
                                "np.sum(out) > 0" if rng.random() < 0.3 else None)
    sizes = _shapes(rng, rows=(0, 1, 2, 3, 5), cols=(1, 2, 3))
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        shape = sizes[0] if call < 3 else sizes[call % len(sizes)]
        info = np.iinfo(dtype)
        choices = np.array([0, 1, -1, 2, 3, -7, 100, info.max, info.min, info.max - 1],
                           dtype=np.int64)
        choices = choices[(choices >= info.min) & (choices <= info.max)]
        a = local.choice(choices, size=shape).astype(dtype)
        b = local.choice(choices, size=shape).astype(dtype)
        return layout(a, LAYOUTS[call % 4]), b

    return Drawn("int_edges", source, make, calls=8)


def _one_op(rng, op, afterwards, tests):
    """``program(a, b)`` computing ``out = op``, sometimes one of ``afterwards`` after it,
    with one of ``tests`` deciding a branch (``fuzz23._one_result``)."""
    lines = [f"out = {op}"]
    if rng.random() < 0.3:
        lines.append(rng.choice(afterwards))
    return fuzz23._one_result("a, b", lines, rng.choice(tests))


# --- NaN through selections -------------------------------------------------------------------
NAN_OPS = [
    "np.where(a > 0, a, b)", "np.where(np.isnan(a), 0.0, a)", "np.where(a != a, b, a)",
    "np.where(a > b, np.nan, a)", "np.select([a > 0, b > 0], [a, b], default=np.nan)",
    "np.select([a > 0, a < 0], [1.0, -1.0])", "np.select([np.isnan(a)], [b], a)",
    "np.clip(a, -1, 1)", "np.clip(a, b, 1.0)", "np.clip(a, np.nan, 1.0)",
    "np.clip(a, -1.0, np.nan)", "np.clip(a, b, None)", "np.clip(a, None, b)",
    "np.clip(a, 1.0, -1.0)", "np.maximum(np.minimum(a, 1), -1)",
    "np.where(a >= 0, np.sqrt(np.abs(a)), -np.sqrt(np.abs(a)))",
    "np.nan_to_num(a, nan=-1.0, posinf=2.0)", "np.where(a > 0, 1.0, 0.0) * a",
    "np.where(np.isfinite(a), a, b).sum(axis=0)", "np.fmax(a, b) - np.fmin(a, b)",
    "np.where((a > 0) & ~np.isnan(b), a, -b)", "np.copysign(np.clip(np.abs(a), 0, 1), a)",
]


def nan_select(rng):
    dtype = rng.choice(["float64", "float32", "float64"])
    source = _one_op(rng, rng.choice(NAN_OPS), ["out = out * 2", "out = np.asarray(out)[::-1]",
                                                "out = out.astype(np.float32)"],
                     [None, None, "np.nansum(out) > 0", "np.isnan(out).any()"])
    sizes = _shapes(rng, rows=(0, 1, 2, 3, 5, 7), cols=(1, 2, 3))
    b_shape = rng.choice(["same", "row", "one"])
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        n, m = sizes[0] if call < 3 else sizes[call % len(sizes)]
        a = data(local, (n, m), dtype, specials=0.3)
        b = data(local, {"same": (n, m), "row": (m,), "one": (1,)}[b_shape], dtype, 0.3)
        return layout(a, LAYOUTS[call % 4]), b

    return Drawn("nan_select", source, make, calls=8, float32=dtype == "float32")


# --- ties, running reductions, einsum ---------------------------------------------------------
TIE_OPS = [
    "np.argmax(a, axis=0)", "np.argmin(a, axis=-1)", "np.argmax(a)", "a.argmin(axis=1)",
    "np.argsort(a, axis=0, kind='stable')", "np.argsort(a, axis=-1, kind='stable')",
    "np.argsort(-a, axis=0, kind='stable')", "np.sort(a, axis=0)", "np.unique(a)",
    "np.cumsum(a, axis=0)", "np.cumsum(a, axis=1)", "np.cumprod(a, axis=0)",
    "np.cumprod(a * 0.5 + 1, axis=-1)", "np.cumsum(a)", "a.cumsum(0)[::-1]",
    "np.einsum('ij,ij->i', a, b)", "np.einsum('ij,kj->ik', a, b)", "np.einsum('ij->ji', a)",
    "np.einsum('ij->', a)", "np.einsum('ii->i', a[:, :1] * b[:1])", "np.einsum('ij,j', a, b[0])",
    "np.einsum('i,j->ij', a[:, 0], b[0])", "np.einsum('...j,...j->...', a, b)",
    "np.max(a, axis=0) == a", "(a == a.max(axis=1, keepdims=True)).sum(axis=1)",
    "np.argmax(a == a.max())", "np.take_along_axis(a, np.argsort(a, axis=0, "
    "kind='stable'), axis=0)", "np.searchsorted(np.sort(a[0]), b[0])",
    "np.diff(a, axis=0)", "np.maximum.accumulate(a, axis=0)",
]


def ties(rng):
    dtype = rng.choice(["float64", "float32", "int32", "int64", "float64"])
    source = _one_op(rng, rng.choice(TIE_OPS), ["out = out + 1", "out = np.asarray(out)[::-1]",
                                                "out = out * 2"],
                     [None, None, "np.sum(out) > 0", "int(np.asarray(out).ravel()[0]) == 0 "
                      "if np.size(out) else False"])
    sizes = _shapes(rng, rows=(1, 2, 3, 5, 7), cols=(1, 2, 3, 4))
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        n, m = sizes[0] if call < 3 else sizes[call % len(sizes)]
        values = np.array([0.0, -0.0, 1.0, 1.0, -1.0, 2.0])
        a = local.choice(values, size=(n, m)).astype(dtype)
        b = local.choice(values, size=(n, m)).astype(dtype)
        return layout(a, LAYOUTS[call % 4]), b

    return Drawn("ties", source, make, calls=8, float32=dtype == "float32")


# --- guard-flipping call sequences ------------------------------------------------------------
FLIP_TESTS = ["x.sum() > 0", "len(x) > 2", "x.shape[1] == 1", "x.size == 0",
              "np.isnan(x).any()", "x.max() > 1.0 if x.size else False",
              "len(x) % 2 == 1", "float(x[0, 0]) < 0 if x.size else True"]
FLIP_BRANCHES = ["y = x * 2", "y = x - x.mean(axis=0) if len(x) else x",
                 "y = np.tanh(x)", "y = x[::-1].copy()", "y = x.T @ x",
                 "y = np.cumsum(x, axis=0)", "y = x[:1]", "y = np.zeros((0, 1))",
                 "y = np.concatenate([x, x])", "y = x.astype(np.float32)"]


def guard_flip(rng):
    tests = [rng.choice(FLIP_TESTS) for _ in range(int(rng.choice((1, 2))))]
    lines = []
    for number, test in enumerate(tests):
        first, second = rng.choice(FLIP_BRANCHES), rng.choice(FLIP_BRANCHES)
        lines += [f"if {test}:", f"    {first}", f"    path = {2 * number + 1}",
                  "else:", f"    {second}", f"    path = {2 * number + 2}"]
        if rng.random() < 0.4:
            lines.append(rng.choice(["print('path', path, y.shape)",
                                     "print(path, float(np.sum(y)) > 0)"]))
        if number == 0 and len(tests) > 1:
            lines.append("x = np.atleast_2d(y.astype(np.float64))")
    lines.append("return y, path")
    sizes = [(0, 3), (1, 1), (2, 2), (3, 1), (5, 2), (7, 3), (1, 5), (11, 1), (2, 0)]
    order = [sizes[int(rng.integers(0, len(sizes)))] for _ in range(4)]
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        shape = order[call % len(order)] if call % 3 else order[(call // 3) % 2]
        x = data(local, shape, "float64", 0.2 if call % 5 == 4 else 0.0)
        if call % 2:
            x = -x  # the other side of a sign test
        return (layout(x, LAYOUTS[call % 4]),)

    return Drawn("guard_flip", _source("x", lines), make, calls=12)


# --- gradients through loops ------------------------------------------------------------------
GRAD_LOOPS = [
    # continue on data, a break on data, a while loop
    "h = np.zeros((1, w.shape[1]))\nfor t in range(len(x)):\n    if x[t].sum() < 0:\n"
    "        continue\n    h = np.tanh(h + x[t:t + 1] @ w)",
    "h = np.zeros((1, w.shape[1]))\nt = 0\nwhile t < len(x):\n"
    "    h = np.tanh(h * 0.5 + x[t:t + 1] @ w)\n    t += 1\n    if h.sum() > 1:\n"
    "        break",
    # rows appended, then stacked or concatenated
    "rows = []\nfor t in range(len(x)):\n    rows.append(np.tanh(x[t] @ w))\nh = np.stack(rows)",
    "rows = []\nfor t in range(len(x)):\n    rows.append(x[t:t + 1] @ w * (t + 1))\n"
    "h = np.concatenate(rows, axis=0)",
    # a triangular nest, a dict of state
    "h = np.zeros((len(x), w.shape[1]))\nfor i in range(len(x)):\n    for j in range(i + 1):\n"
    "        h[i] = h[i] + np.tanh(x[j] @ w) / (i + 1)",
    "state = {'h': np.zeros(w.shape[1]), 'n': 0}\nfor t in range(len(x)):\n"
    "    state['h'] = np.tanh(state['h'] * 0.5 + x[t] @ w)\n    state['n'] += 1\n"
    "h = state['h'][None] * state['n']",
    # a running sum and an einsum
    "h = np.cumsum(x @ w, axis=0)", "h = np.einsum('ij,jk->ik', x, w) ** 2",
    "h = np.cumprod(1 + 0.1 * np.tanh(x @ w), axis=0)",
]


def grad_loops(rng):
    lines = rng.choice(GRAD_LOOPS).split("\n")
    lines.append(f"return {rng.choice(fuzz24.GRAD_LOSS[:6])}")
    if "y" in lines[-1]:
        lines.insert(-1, "y = np.ones_like(h) * 0.5")
    drawn = fuzz24.tensor_grad(rng)  # its argument maker: w (k, m), x (n, k)
    return Drawn("grad_loops", _source("w, x", lines), drawn.make, calls=drawn.calls)


# --- comparing --------------------------------------------------------------------------------
def check_prints(program):
    """Each call's printed text, eager vs compiled (the values ``check_values`` compares)."""
    import tracejit as tj

    function = fuzz.load(program.source)
    compiled = tj.jit(function, cache="memory")
    for call in range(program.calls):
        texts = []
        for runner in (function, compiled):
            buffer = io.StringIO()
            with np.errstate(all="ignore"), warnings.catch_warnings(), \
                    contextlib.redirect_stdout(buffer):
                warnings.simplefilter("ignore")
                try:
                    runner(*program.make(call))
                except Exception as error:  # noqa: BLE001 - check_values compares these
                    buffer.write(f"<{type(error).__name__}>")
            texts.append(buffer.getvalue())
        if texts[0] != texts[1]:
            return "prints differ", f"call {call}: jit {texts[1]!r} != eager {texts[0]!r}"
    return None


def check(program):
    if program.family == "grad_loops":
        return fuzz24.check_grad(program)
    problem = fuzz24.check_values(program)
    if problem is None and "print(" in program.source:
        problem = check_prints(program)
    return problem


FAMILIES = {"skip_loops": skip_loops, "triangular": triangular,
            "stacked_lists": stacked_lists, "dict_state": dict_state,
            "carried_views": carried_views, "int_edges": int_edges, "nan_select": nan_select,
            "ties": ties, "guard_flip": guard_flip,
            "grad_loops": grad_loops}


def draw(seed, families=None):
    return fuzz.draw_family(FAMILIES, seed, families)


if __name__ == "__main__":
    fuzz23.main(draw, check, __doc__.splitlines()[0])
