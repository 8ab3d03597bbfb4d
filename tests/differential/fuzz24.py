"""Round 24's generators: writes through views, carried loops with breaks, reductions over
axis tuples, NumPy 2 promotion in place, and gradients of Tensors.

Beside ``fuzz23.py`` (whose ``Drawn``, ``layout``, ``data`` and ``scalar`` these reuse), each
family writes a whole small function with its own argument maker::

    program = draw(seed)               # a Drawn: source, family, make(call) -> arguments
    print(program.source)
    problem = check(program)           # None, or (kind, text) as fuzz.run_one says

Families (``FAMILIES``):

* ``view_writes``: a view of an argument or of a copy of it (slices with steps and negative
  steps, ``.T``, ``swapaxes``, ``reshape``/``ravel`` (a view only when the layout allows:
  F-order and ``[::2]`` arguments make copies, so whether the argument changes depends on
  the call), ``x[None]``, ``np.broadcast_to`` (read-only: NumPy raises on a write)) written
  in place (``+=``, ``[...] =``, masked writes, ``out=`` ufuncs, ``np.copyto``, overlapping
  ``v[1:] += v[:-1]``), once or in a loop, then the view, the base and the argument
  returned; results' identity (``is``, shared memory, writeable) is compared too;
* ``carry_break``: loops carrying several values of different kinds at once (a float32 or
  float64 array, a Python float, an int counter, a bool array, a 0-d array, a pair swapped
  ``a, b = b, a + b``) and leaving on data (``np.isnan(h).any()``, a tolerance on a delta,
  an argmax that settles, a counter) from ``for ... break`` and ``while`` forms;
* ``reduce_axes``: 3-d reductions over axis tuples (in any order, negative), ``keepdims``,
  ``where=`` masks that broadcast, ``initial=``, over bool/int/float32/float64 with
  NaN/Inf/-0.0/denormals, sizes 0/1/primes, transposed and reversed layouts;
* ``promote_inplace``: in-place arithmetic and ``out=`` whose result dtype NumPy 2 fixes
  (``a += 1.5`` of an int array raises, ``f32 *= np.float64(2)`` stays float32, Python ints
  past an int8/int32 raise OverflowError, 0-d arrays are not weak), result dtypes exactly;
* ``tensor_grad``: a scalar loss of Tensors (pointwise math, matmul, slices, reshape,
  transposes, reductions, ``where``/``maximum`` kinks, concatenation, buffers written in
  place, a loop carrying a hidden state) differentiated with ``jit(value_and_grad(loss))``
  and with ``jit(loss)`` on Tensors and ``.backward()``, against ``value_and_grad`` run
  eagerly and central finite differences of the NumPy function.

Run offline::

    nice -n 10 .venv/bin/python tests/differential/fuzz24.py --minutes 10 --seed 1

``test_fuzz_findings24.py`` runs a bounded, seeded sample in CI.
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import fuzz  # noqa: E402 - beside this file, not a package
import fuzz23  # noqa: E402
from fuzz23 import Drawn, data, layout, scalar  # noqa: E402

LAYOUTS = ("C", "F", "rev", "every_other")


def _source(params, lines):
    return f"def program({params}):\n" + "".join(f"    {line}\n" for line in lines)


# --- writes through views --------------------------------------------------------------------
VIEWS = {
    # name: (expression of ``base``, which writes make sense: '2d', '1d', 'ro')
    "rows": ("base[1:]", "2d"), "step": ("base[::2]", "2d"), "rev": ("base[::-1]", "2d"),
    "cols": ("base[:, 1:]", "2d"), "colrev": ("base[:, ::-1]", "2d"), "T": ("base.T", "2d"),
    "swap": ("base.swapaxes(0, 1)[::2]", "2d"), "rowT": ("base[1:].T", "2d"),
    "reshape": ("base.reshape(-1)", "1d"), "ravel": ("base.ravel()", "1d"),
    "reshape3": ("base.reshape(base.shape[0], -1, 1)", "3d"), "newaxis": ("base[None]", "3d"),
    "row0": ("base[0]", "1d"), "col0": ("base[:, 0]", "1d"), "ellipsis": ("base[...]", "2d"),
    "bcast": ("np.broadcast_to(base[0], (3,) + base.shape[1:])", "ro"),
    "bcast_col": ("np.broadcast_to(base[:, :1], base.shape)", "ro"),
    "flat_rev": ("base.reshape(-1)[::-1]", "1d"),
}
WRITES = [
    "v += 1.5", "v *= 2", "v[...] = np.tanh(v)", "v -= v.mean()", "v[:1] = 0",
    "v[v > 0] *= 2", "v[v < 0] = -1", "np.add(v, 1, out=v)", "np.multiply(v, v, out=v)",
    "np.copyto(v, v * 0.5)", "v[1:] += v[:-1]", "v[:-1] = v[1:]", "v[...] = v[::-1]",
    "np.maximum(v, 0, out=v)", "v **= 2", "v /= 3", "np.negative(v, out=v)",
    "v[::2] = 7.0", "v.fill(0.25)", "np.clip(v, -0.5, 0.5, out=v)",
]


def view_writes(rng):
    dtype = rng.choice(["float64", "float32", "float64"])
    view_name = rng.choice(list(VIEWS))
    expression, _kind = VIEWS[view_name]
    target = rng.choice(["x", "x.copy()", "x", "np.zeros_like(x) + x", "x.T.copy().T"])
    loop = rng.random() < 0.3
    writes = [rng.choice(WRITES) for _ in range(int(rng.choice([1, 1, 2])))]
    lines = [f"base = {target}", f"v = {expression}"]
    if loop:
        lines.append("for i in range(n):")
        lines += [f"    {write}" for write in writes]
        if rng.random() < 0.5:
            lines += ["    if v.size and float(np.abs(v).max()) > 50:", "        break"]
    else:
        lines += writes
    tail = rng.choice(["return v, base, x", "return base, x", "return v.sum(), x",
                       "return v.copy(), base.copy()", "return base[::-1], v"])
    lines.append(tail)
    params = "x, n" if loop else "x"
    sizes = [(int(rng.choice((2, 3, 5))), int(rng.choice((2, 3, 7))))]
    sizes += [(int(rng.choice((1, 2, 3, 5, 7, 11))), int(rng.choice((1, 2, 3, 5, 13))))
              for _ in range(3)]
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        shape = sizes[0] if call < 3 else sizes[call % len(sizes)]
        x = layout(data(local, shape, dtype, 0.05 if call % 5 == 4 else 0.0),
                   LAYOUTS[call % 4])
        return (x, int(local.integers(0, 5))) if loop else (x,)

    return Drawn("view_writes", _source(params, lines), make, calls=9,
                 float32=dtype == "float32")


# --- loops carrying several values, leaving on data -------------------------------------------
def carry_break(rng):
    dtype = rng.choice(["float64", "float32"])
    form = rng.choice(["for", "while", "while_true", "for_else"])
    carries = ["h = x[0] * 0", "total = 0.0", "count = 0", "seen = np.zeros(x.shape[1], bool)",
               "z = np.asarray(0.0)", "a, b = x[0].copy(), x[-1].copy()", "prev = h + 1"]
    body = [
        "row = x[i % len(x)]",
        rng.choice(["h = np.tanh(h * 0.8 + row)", "h = h * 0.5 + row * np.float32(0.5)",
                    "h = np.where(row > h, row, h * 0.9)", "h = h + row / (i + 1)",
                    "h = np.sqrt(np.abs(h)) - row"]),
        rng.choice(["total += float(h.sum())", "total = total * 0.9 + float(h[0])",
                    "total += 1.5"]),
        rng.choice(["count += int((h > 0).sum())", "count += 1", "count = count * 2 % 7"]),
        rng.choice(["seen |= h > 0", "seen = seen ^ (row < 0)", "seen[i % seen.size] = True"]),
        rng.choice(["z = z + h.max()", "z = np.asarray(z * 0.5 + 1)", "z += h.min()"]),
        rng.choice(["a, b = b, a + b * 0.5", "a, b = b * 0.5, a", "a = a + b"]),
    ]
    stop = rng.choice([
        "np.isnan(h).any()", "np.abs(h - prev).max() < 0.05", "count > 4", "total > 3.0",
        "seen.all()", "int(np.argmax(h)) == 0", "float(z) > 2", "not np.isfinite(total)",
        "np.abs(a).max() > 10", "i > 2 and h.sum() < 0"])
    after = ["prev = h"]
    if form == "for":
        lines = carries + ["for i in range(n):"] + [f"    {s}" for s in body] + [
            f"    if {stop}:", "        break"] + [f"    {s}" for s in after]
    elif form == "for_else":
        lines = carries + ["for i in range(n):"] + [f"    {s}" for s in body] + [
            f"    if {stop}:", "        break"] + [f"    {s}" for s in after] + [
            "else:", "    count = -count"]
    elif form == "while":
        lines = carries + ["i = 0", f"while i < n and not ({stop}):"] + [
            f"    {s}" for s in body + after + ["i += 1"]]
    else:
        lines = carries + ["i = 0", "while True:", "    if i >= n:", "        break"] + [
            f"    {s}" for s in body] + [f"    if {stop}:", "        break"] + [
            f"    {s}" for s in after + ["i += 1"]]
    lines.append("return h, total, count, seen, z, a, b")
    sizes = [(int(rng.choice((3, 5))), int(rng.choice((2, 3))))]
    sizes += [(int(rng.choice((1, 2, 3, 5, 7))), int(rng.choice((1, 2, 3, 5)))) for _ in range(3)]
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        shape = sizes[0] if call < 3 else sizes[call % len(sizes)]
        x = layout(data(local, shape, dtype, 0.1 if call % 4 == 3 else 0.0), LAYOUTS[call % 4])
        return x, int(local.integers(0, 12))

    return Drawn("carry_break", _source("x, n", lines), make, calls=10,
                 float32=dtype == "float32")


# --- reductions over axis tuples ---------------------------------------------------------------
REDUCERS = ["np.sum", "np.max", "np.min", "np.mean", "np.prod", "np.any", "np.all",
            "np.std", "np.var", "np.nansum", "np.nanmax", "np.count_nonzero", "np.ptp",
            "np.argmax", "np.median", "np.nanmean", "np.linalg.norm"]


def reduce_axes(rng):
    dtype = rng.choice(["float64", "float32", "int32", "int64", "bool", "float64"])
    reducer = rng.choice(REDUCERS)
    single = reducer in ("np.argmax", "np.ptp", "np.count_nonzero")
    axis = rng.choice(["0", "-1", "None", "(0, 2)", "(2, 0)", "(-1, -3)", "(0, 1, 2)",
                       "(1,)", "()", "(1, -1)"])
    if reducer == "np.argmax" and axis.startswith("("):
        axis = "1"
    if reducer == "np.linalg.norm":
        axis = rng.choice(["0", "-1", "(0, 2)", "(1, 2)"])
    keywords = [f"axis={axis}"]
    if rng.random() < 0.5 and reducer not in ("np.argmax", "np.count_nonzero"):
        keywords.append("keepdims=True")
    if reducer in ("np.sum", "np.max", "np.min", "np.mean", "np.prod", "np.any", "np.all",
                   "np.nansum", "np.nanmax", "np.std", "np.var") and rng.random() < 0.4:
        keywords.append(rng.choice(["where=m", "where=m[:, :1]", "where=m[0]",
                                    "where=m[..., :1]"]))
        if reducer in ("np.max", "np.min", "np.nanmax"):
            keywords.append("initial=-5")
    if reducer in ("np.sum", "np.prod") and rng.random() < 0.3:
        keywords.append(rng.choice(["initial=1", "dtype=np.float64", "dtype=np.int64"]))
    if reducer in ("np.std", "np.var") and rng.random() < 0.4:
        keywords.append("ddof=1")
    if single and "(" in axis and reducer != "np.count_nonzero":
        keywords[0] = "axis=1"
    call = f"{reducer}(a, {', '.join(keywords)})"
    extra = rng.choice(["", "out = out * 2", "out = np.asarray(out) > 0", "out = -out"])
    lines = [f"out = {call}"] + ([extra] if extra else [])
    source = fuzz23._one_result("a, m", lines, "np.sum(out) > 0" if rng.random() < 0.3
                                else None)
    sizes = [(int(rng.choice((2, 3))), int(rng.choice((3, 5))), int(rng.choice((2, 7))))]
    sizes += [tuple(int(rng.choice((0, 1, 2, 3, 5, 7))) for _ in range(3)) for _ in range(3)]
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        shape = sizes[0] if call < 3 else sizes[call % len(sizes)]
        a = data(local, shape, dtype, 0.15 if call % 3 == 2 else 0.0)
        how = LAYOUTS[call % 4]
        if how == "F":
            a = np.ascontiguousarray(a.transpose(2, 1, 0)).transpose(2, 1, 0)
        else:
            a = layout(a, how)
        m = local.random(shape) < 0.6
        return a, m

    return Drawn("reduce_axes", source, make, calls=8,
                 float32=dtype == "float32" or "norm" in reducer)


# --- NumPy 2 promotion in place -----------------------------------------------------------------
def promote_inplace(rng):
    da = rng.choice(["int8", "int32", "int64", "float32", "float64", "bool", "uint8"])
    skind = rng.choice(["int", "float", "f32", "i64", "zerod", "zerod_i", "bool", "f64",
                        "big", "zerod_f32"])
    op = rng.choice([
        "a += s", "a -= s", "a *= s", "a /= s", "a //= s", "a %= s", "a **= 2", "a |= s",
        "a[...] = s", "a[0] = s", "np.add(a, s, out=a)", "np.multiply(a, s, out=a)",
        "a = a + s", "a = s * a", "a = a / s", "a = a - s", "a = np.maximum(a, s)",
        "a = np.where(a > 0, a, s)", "a = a.astype(np.float32) + s", "a = a * 2 + s * 3",
        "a = np.add(a, s, casting='unsafe', out=np.empty_like(a))",
        "a = np.true_divide(a, s, out=np.zeros(a.shape, np.float32))",
    ])
    lines = ["a = a.copy()", op, "r = a.sum() + s", "return a, r, a.dtype.name"]
    seed = int(rng.integers(0, 2**31))
    svalue = rng.choice([3, -2, 0.5, 200, 1, 2.5])

    def make(call):
        local = np.random.default_rng(seed + call)
        shape = [(3, 2), (1,), (0, 3), (5,), (7, 1), (2, 3)][call % 6]
        a = layout(data(local, shape, da), LAYOUTS[call % 4])
        value = svalue if call % 2 == 0 else -svalue
        s = {"f64": np.float64(value), "big": 2**40 + 1,
             "zerod_f32": np.asarray(value, np.float32)}.get(skind)
        if s is None:
            s = scalar(local, skind, value)
        return a, s

    return Drawn("promote_inplace", _source("a, s", lines), make, calls=8,
                 float32=da == "float32" or skind in ("f32", "zerod_f32"))


# --- gradients of Tensors ----------------------------------------------------------------------
GRAD_STEPS = [
    "h = np.tanh(x @ w)", "h = np.maximum(x @ w, 0)", "h = 1 / (1 + np.exp(-(x @ w)))",
    "h = (x @ w) * (x @ w)", "h = np.where(x @ w > 0, x @ w, 0.1 * (x @ w))",
    "h = np.sqrt((x @ w) ** 2 + 1)", "h = np.log(1 + np.exp(x @ w))",
    "h = np.abs(x @ w)", "h = np.clip(x @ w, -0.5, 0.5)", "h = (x @ w) / (1 + np.abs(x @ w))",
    # recurrences over x's rows: a captured loop, one with a break on data, a buffer of rows
    "h = np.zeros((1, w.shape[1]))\nfor t in range(len(x)):\n"
    "    h = np.tanh(h * 0.5 + x[t:t + 1] @ w)",
    "h = np.zeros((1, w.shape[1]))\nfor t in range(len(x)):\n"
    "    h = np.tanh(h * 0.5 + x[t:t + 1] @ w)\n    if h.sum() > 1.5:\n        break",
    "h = np.zeros((len(x), w.shape[1]))\nfor t in range(len(x)):\n"
    "    h[t] = np.tanh(x[t] @ w + (h[t - 1] if t else 0))",
]
GRAD_MIDDLE = [
    "h = h - h.mean(axis=0, keepdims=True)", "h = h[:, ::-1]", "h = h.T.T * 2",
    "h = h.reshape(-1).reshape(h.shape)", "h = np.concatenate([h, h[:, :1] * 3], axis=1)[:, 1:]",
    "h = h / (np.linalg.norm(h, axis=1, keepdims=True) + 1)",
    "e = np.exp(h - h.max(axis=1, keepdims=True)); h = e / e.sum(axis=1, keepdims=True)",
    "h = h * x[:, :1]", "h = h + h[::-1]", "h = np.maximum(h, h[:, :1])",
    "buf = np.zeros_like(h); buf[:, 1:] = h[:, :-1]; h = buf + h",
    "for t in range(3):\n    h = np.tanh(h * 0.5 + x[:, :1] * w[0, 0])",
    "h = np.stack([h, h * 2]).sum(axis=0)", "h = h[1:] if len(h) > 1 else h",
    "h = np.transpose(h)[:, ::2].T",
]
GRAD_LOSS = ["np.sum(h ** 2)", "np.mean(h)", "h.sum() * 0.5", "np.sum(h * y)",
             "np.max(h)", "np.sum(np.log1p(h * h))", "float(0) + np.mean(h * h)"]


def tensor_grad(rng):
    middles = [rng.choice(GRAD_MIDDLE) for _ in range(int(rng.choice([0, 1, 2])))]
    lines = rng.choice(GRAD_STEPS).split("\n")
    for middle in middles:
        lines += middle.split("\n")
    loss = rng.choice(GRAD_LOSS)
    if "y" in loss:
        lines.append("y = np.ones_like(h) * 0.5" if rng.random() < 0.5 else
                     "y = np.cos(np.arange(h.size).reshape(h.shape))")
    lines.append(f"return {loss}")
    sizes = [(int(rng.choice((2, 3, 5))), int(rng.choice((2, 3))), int(rng.choice((2, 3, 4))))]
    sizes += [(int(rng.choice((1, 2, 3, 5, 7))), int(rng.choice((1, 2, 3))),
               int(rng.choice((1, 2, 5)))) for _ in range(2)]
    seed = int(rng.integers(0, 2**31))

    def make(call):
        local = np.random.default_rng(seed + call)
        n, k, m = sizes[0] if call < 3 else sizes[call % len(sizes)]
        w = local.standard_normal((k, m)) * 0.7
        x = local.standard_normal((n, k))
        if call % 4 == 1:
            x = np.asfortranarray(x)
        return w, x

    return Drawn("tensor_grad", _source("w, x", lines), make, calls=6)


def _finite_differences(function, w, x, step=1e-6):
    grad = np.zeros_like(w)
    for index in np.ndindex(w.shape):
        plus, minus = w.copy(), w.copy()
        plus[index] += step
        minus[index] -= step
        grad[index] = (float(function(plus, x)) - float(function(minus, x))) / (2 * step)
    return grad


def check_grad(program):
    """``jit(value_and_grad(f))`` and ``jit(f)`` on Tensors with ``.backward()`` vs eager
    ``value_and_grad`` (and central differences where ``f`` is smooth at the point)."""
    import tracejit as tj

    function = fuzz.load(program.source)
    stepped = tj.jit(tj.value_and_grad(function), cache="memory")
    on_tensors = tj.jit(function, cache="memory")
    for call in range(program.calls):
        w, x = program.make(call)
        where = f"call {call} (w {w.shape}, x {x.shape})"
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want_value, want_grad = tj.value_and_grad(function)(w.copy(), x.copy())
            except Exception as error:  # noqa: BLE001
                eager_error = error
            else:
                eager_error = None
            try:
                got_value, got_grad = stepped(w.copy(), x.copy())
            except Exception as error:  # noqa: BLE001
                if eager_error is None or not isinstance(error, type(eager_error)):
                    return "jit raised", f"{where}: value_and_grad: {error!r}\n" + "".join(
                        traceback.format_exception(error))[-2000:]
                continue
            if eager_error is not None:
                return "jit did not raise", f"{where}: eager raised {eager_error!r}"
            tw = tj.tensor(w.copy(), requires_grad=True)
            try:
                value = on_tensors(tw, x.copy())
                value.backward()
                tensor_grad_ = tw.grad.numpy() if tw.grad is not None else np.zeros_like(w)
                tensor_value = float(value.numpy())
            except Exception as error:  # noqa: BLE001
                return "jit raised", f"{where}: jit(f)(Tensor).backward(): {error!r}\n" + \
                    "".join(traceback.format_exception(error))[-2000:]
            numeric = _finite_differences(function, w, x)
        for name, got, value in (("value_and_grad", got_grad, got_value),
                                 ("Tensor.backward", tensor_grad_, tensor_value)):
            if not np.isclose(float(value), float(want_value), rtol=1e-9, atol=1e-12):
                return "result differs", f"{where}: {name} value {value!r} != {want_value!r}"
            if not np.allclose(got, want_grad, rtol=1e-7, atol=1e-9, equal_nan=True):
                return "result differs", (f"{where}: {name} gradient\n{got}\n!= eager\n"
                                          f"{want_grad}\n(finite differences\n{numeric})")
        # eager's own gradient vs central differences: only where they agree closely
        # elsewhere (kinks of abs/max/clip/relu make the numeric one a subgradient's mix)
        smooth = not any(kink in program.source for kink in (
            "maximum", "abs", "clip", "where", "max(", "sqrt(", "> 0"))
        if smooth and not np.allclose(want_grad, numeric, rtol=1e-4, atol=1e-5):
            return "gradient differs from finite differences", (
                f"{where}: eager {want_grad} vs numeric {numeric}")
    for jitted in (stepped, on_tensors):
        for reason in jitted.stats().get("eager_calls") or {}:
            if "internal error" in reason:
                return "internal error", f"{reason}: {jitted.explain()[-3000:]}"
    return None


# --- comparing ---------------------------------------------------------------------------------
def check_values(program):
    """``fuzz23.check`` and the results' identity: ``is``, shared memory and writeable of
    every pair of result arrays and of each result with each argument."""
    import tracejit as tj

    problem = fuzz23.check(program)
    if problem or program.family not in ("view_writes", "promote_inplace"):
        return problem
    function = fuzz.load(program.source)
    compiled = tj.jit(function, cache="memory")
    for call in range(program.calls):
        eager_args, jit_args = program.make(call), program.make(call)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want = function(*eager_args)
            except Exception:  # noqa: BLE001 - fuzz23.check compared exceptions
                continue
            got = compiled(*jit_args)
        got_relations = fuzz.relations(got, jit_args)
        want_relations = fuzz.relations(want, eager_args)
        if got_relations != want_relations:
            return "identity differs", (f"call {call}: (is, shares memory, writeable) "
                                        f"{got_relations} != {want_relations}")
    return None


def check(program):
    if program.family == "tensor_grad":
        return check_grad(program)
    return check_values(program)


FAMILIES = {"view_writes": view_writes, "carry_break": carry_break,
            "reduce_axes": reduce_axes, "promote_inplace": promote_inplace,
            "tensor_grad": tensor_grad}


def draw(seed, families=None):
    return fuzz.draw_family(FAMILIES, seed, families)


if __name__ == "__main__":
    fuzz23.main(draw, check, __doc__.splitlines()[0])
