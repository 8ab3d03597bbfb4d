"""The NumPy API over primitives: what ``np.tanh(t)`` or ``np.sum(t, axis=0)`` means for a
``tracejit.Tensor`` or a tracer proxy.

Two tables, ``UFUNCS`` (with the other ufunc tables, in ``tracejit.tracer.ufuncs``) and
``FUNCTIONS``, map NumPy's own callables to implementations with NumPy's signatures;
``array_function`` is the ``__array_function__`` body that Tensor and the tracer share
(``tracejit.tracer.ufunc_calls.array_ufunc`` is the ``__array_ufunc__`` one).
Composites (mean, var, clip, stack, eye, ...) are written here with primitives, so their
gradients and fusion come for free.

>>> float(mean(np.arange(4.0))), clip(np.array([-2.0, 0.5, 3.0]), 0.0, 1.0).tolist()
(1.5, [0.0, 0.5, 1.0])
"""

from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from . import (
    array_reshaping,
    choices,
    correlations,
    counting,
    even_spacing,
    finite_differences,
    math_composites,
    ops,
    pad_modes,
    products,
    searching,
    statistics,
)
from .array_comparisons import array_equal, array_equiv
from .conversions import keep_python_int_in_range, python_int_past_range
from .copy_into import copyto
from .diagonals import diag, diagflat, diagonal, diagonal_offsets, fill_diagonal, trace
from .dims import SymInt
from .einsum import einsum, numpy_tensordot, tensordot
from .errors import UnsupportedError, as_numpy_would
from .flat_index import ravel_multi_index, unravel_index
from .indexing import NARROW_POSITIONS, getitem, keep_numpy_scalar_in_range
from .nan_reductions import (
    nanargmax,
    nanargmin,
    nancumsum,
    nanmax,
    nanmean,
    nanmin,
    nanprod,
    nanstd,
    nansum,
    nanvar,
)
from .nan_replacement import nan_to_num
from .out_arguments import check_cast, write_out
from .primitives import as_array, bind, is_traced
from .reduction_functions import (  # the reductions are numpy_api's too (FUNCTIONS)
    all,
    any,
    argmax,
    argmin,
    count_nonzero,
    max,
    mean,
    min,
    no_out,
    prod,
    std,
    sum,
    var,
)
from .scans import argsort, cumprod, cumsum, sort
from .shape_functions import atleast_1d, atleast_2d, atleast_3d, broadcast_arrays
from .shapes import ShapeError, normalize_axes, normalize_axis, size_of
from .ufuncs import FOREIGN_UFUNCS as FOREIGN_UFUNCS  # the tables are numpy_api's too
from .ufuncs import UFUNC_COMPOSITES, cast
from .ufuncs import UFUNCS as UFUNCS

shape_of, ndim_of, dtype_of = ops.shape_of, ops.ndim_of, ops.dtype_of


# --- shape manipulation ----------------------------------------------------------------
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    shape = shape if shape is not None else newshape
    if order == "F":  # the first index fastest: C order on the reversed axes
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        return ops.transpose(ops.reshape(ops.transpose(a, None), shape[::-1]), None)
    if order != "C":
        raise UnsupportedError(f"np.reshape(order={order!r}) is not supported; use order='C' "
                               "or 'F'")
    return ops.reshape(a, shape)


def transpose(a, axes=None):
    return ops.transpose(a, axes)


def swapaxes(a, axis1, axis2):
    return ops.swapaxes(a, axis1, axis2)


def moveaxis(a, source, destination):
    ndim = ndim_of(a)
    sources = [normalize_axis(axis, ndim) for axis in _as_list(source)]
    destinations = [normalize_axis(axis, ndim) for axis in _as_list(destination)]
    order = [axis for axis in range(ndim) if axis not in sources]
    for destination_axis, source_axis in sorted(zip(destinations, sources)):
        order.insert(destination_axis, source_axis)
    return ops.transpose(a, order)


def _as_list(axes):
    return list(axes) if isinstance(axes, (tuple, list)) else [axes]


def expand_dims(a, axis):
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    ndim = ndim_of(a) + len(axes)
    axes = normalize_axes(axes, ndim)
    dims = iter(shape_of(a))
    return ops.reshape(a, tuple(1 if i in axes else next(dims) for i in range(ndim)))


def squeeze(a, axis=None):
    shape = shape_of(a)
    if axis is None:
        axes = tuple(i for i, dim in enumerate(shape) if isinstance(dim, int) and dim == 1)
    else:
        axes = normalize_axes(axis, len(shape))
        for i in axes:
            if shape[i] != 1:
                raise ShapeError(
                    "cannot select an axis to squeeze out which has size not equal to one"
                )
    return ops.reshape(a, tuple(dim for i, dim in enumerate(shape) if i not in axes))


def ravel(a, order="C"):
    return reshape(a, (-1,), order=order)


def broadcast_to(array, shape, subok=False):
    """A read-only view, as NumPy's: writing into it raises NumPy's ValueError."""
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    result = ops.broadcast_to(array, tuple(shape))
    if result is array:  # the same shape: still a new, read-only view (reshape gave the
        result = array[...]  # array itself, so readonly below made the caller's read-only)
    if is_traced(result):
        result.readonly = True
    view_without_steps(array, result)  # a write into array while it lives: eager
    return result


def view_without_steps(base, view):
    """Note ``view`` (a new tracer) as a view of ``base`` whose elements the trace cannot
    follow (a broadcast, a diagonal, sliding windows): NumPy's view shows a write into
    ``base`` made while it lives, so such a write runs the call eagerly
    (``traced_array.note_view``), and a write through ``view`` does too."""
    from .traced_array import Tracer, note_view  # cycle: traced_array -> numpy_api

    if isinstance(base, Tracer) and isinstance(view, Tracer) and view is not base:
        note_view(base, view)


def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    no_out("concatenate", out)
    arrays = tuple(arrays)
    result = ops.concatenate(arrays, axis=axis)
    if len(arrays) == 1:  # ops' is the array itself (or its reshape): NumPy's is new
        result = copy(result)
    return astype(result, dtype) if dtype is not None else result


def _new_array(result):
    """``result``, an input's reshape or broadcast, as a new array (NumPy's tile and repeat
    always copy): writing into it, or into what the call returns, leaves the input alone."""
    return copy(result)


def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    no_out("stack", out)
    arrays = tuple(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    # Compared dim by dim: a dim equal to a size (s1 == 3) counts as equal, with its guard.
    first = tuple(shape_of(arrays[0]))
    for array in arrays[1:]:
        shape = tuple(shape_of(array))
        if len(shape) != len(first) or not all(a == b for a, b in zip(first, shape)):
            raise ShapeError("all input arrays must have the same shape")
    axis = normalize_axis(axis, ndim_of(arrays[0]) + 1)
    result = ops.concatenate([expand_dims(a, axis) for a in arrays], axis=axis)
    if len(arrays) == 1:  # ops' is a reshape of the array: NumPy's is new
        result = copy(result)
    return astype(result, dtype) if dtype is not None else result


def array_of(values, dtype=None, **kwargs):
    """``np.array([...])`` of traced values, dynamic dims and numbers (``np.array(losses)``,
    ``np.array(x.shape)``): a stack, in NumPy's dtype for them (a Python float counts as
    float64 here, as in any array NumPy builds from a list); dims stay symbolic.

    >>> import tracejit as tj
    >>> tj.jit(lambda x: np.array(x.shape) * 2, cache="memory")(np.ones((3, 5)))
    array([ 6, 10])
    >>> tj.jit(lambda x: np.array([x.sum(), 1]), cache="memory")(np.ones(2, np.float32))
    array([2., 1.])
    """
    if not kwargs and values and builtins.all(type(value) in (list, tuple)
                                              for value in values):
        # np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]): a stack of rows
        _keep_scalars_in_range(builtins.sum((list(row) for row in values), []), dtype)
        rows = [array_of(row) for row in values]
        common = np.result_type(*[dtype_of(row) for row in rows])
        result = stack([astype(row, common) for row in rows])
        return astype(result, dtype) if dtype is not None else result
    if kwargs or not builtins.all(isinstance(value, (bool, int, float, SymInt, np.generic,
                                                     np.ndarray)) or is_traced(value)
                                  for value in values):  # deeper: NumPy's, on the dims' values
        return np.array([int(value) if isinstance(value, SymInt) else value
                         for value in values], dtype, **kwargs)
    parts = [bind(ops.cast_p, value, dtype=np.dtype(np.int64)) if isinstance(value, SymInt)
             else value if is_traced(value) else np.asarray(value) for value in values]
    _keep_scalars_in_range(values, dtype)
    common = np.result_type(*[dtype_of(part) for part in parts])
    result = stack([astype(part, common) for part in parts])
    return astype(result, dtype) if dtype is not None else result


def _keep_scalars_in_range(values, dtype):
    """``np.array([x.sum(), n], dtype=np.int32)``: NumPy converts each NumPy scalar with
    Python's ``int`` into a signed integer dtype (raising past its range or at NaN), as an
    element assignment does (``indexing.keep_numpy_scalar_in_range``)."""
    if dtype is not None and np.dtype(dtype).kind == "i":
        for value in values:
            if is_traced(value):
                keep_numpy_scalar_in_range(value, dtype)


def hstack(tup, dtype=None, casting="same_kind"):
    arrays = [atleast_1d(a) for a in tup]
    return concatenate(arrays, axis=0 if ndim_of(arrays[0]) == 1 else 1, dtype=dtype)


def vstack(tup, dtype=None, casting="same_kind"):
    arrays = [a if ndim_of(a) >= 2 else ops.reshape(a, (1, -1)) for a in tup]
    return concatenate(arrays, axis=0, dtype=dtype)


def split(ary, indices_or_sections, axis=0):
    axis = normalize_axis(axis, ndim_of(ary))
    length = shape_of(ary)[axis]
    if is_traced(indices_or_sections) or isinstance(indices_or_sections, SymInt):
        # np.split(x, n_head) with n_head a run-time int: the count decides the shapes,
        # so it is specialized under a guard
        indices_or_sections = operator.index(indices_or_sections)
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if length % sections:
            raise ValueError("array split does not result in an equal division")
        step = length // sections
        bounds = [i * step for i in range(sections + 1)]
    else:  # NumPy slices between the indices: past the end clips, negatives wrap
        bounds = [0, *indices_or_sections, length]
        return [getitem(ary, (slice(None),) * axis + (slice(start, stop),))
                for start, stop in zip(bounds[:-1], bounds[1:])]
    return [
        _take_range(ary, axis, start, stop) for start, stop in zip(bounds[:-1], bounds[1:])
    ]


def array_split(ary, indices_or_sections, axis=0):
    """``np.array_split``: ``np.split`` into sections that need not be equal, the first
    ``length % sections`` of them one longer (minibatches: ``zip(np.array_split(X, k),
    np.array_split(y, k))``). Which sections are longer depends on the remainder, so a
    dynamic length's remainder is specialized under a guard, as a shape relation."""
    axis = normalize_axis(axis, ndim_of(ary))
    if is_traced(indices_or_sections) or isinstance(indices_or_sections, SymInt):
        indices_or_sections = operator.index(indices_or_sections)
    if not isinstance(indices_or_sections, (int, np.integer)):
        return split(ary, indices_or_sections, axis)
    sections = int(indices_or_sections)
    if sections <= 0:
        raise ValueError("number sections must be larger than 0.")
    length = shape_of(ary)[axis]
    each, extras = length // sections, operator.index(length % sections)
    bounds = [0]
    for section in range(sections):
        bounds.append(bounds[-1] + each + (1 if section < extras else 0))
    return [
        _take_range(ary, axis, start, stop) for start, stop in zip(bounds[:-1], bounds[1:])
    ]


def _take_range(a, axis, start, stop):
    shape = shape_of(a)
    starts = tuple(start if i == axis else 0 for i in range(len(shape)))
    limits = tuple(stop if i == axis else dim for i, dim in enumerate(shape))
    return ops.slice_axes(a, starts, limits, (1,) * len(shape))


def sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    """``np.lib.stride_tricks.sliding_window_view`` (one window per axis; a writeable
    view is refused: writes through overlapping windows have no array semantics). The
    windows are a read-only view of ``x``, as NumPy's: a write into ``x`` while they live
    runs the call eagerly (``traced_array.note_view``)."""
    if writeable:
        raise UnsupportedError("sliding_window_view(writeable=True) is not supported")
    sizes = tuple(window_shape) if np.iterable(window_shape) else (window_shape,)
    if axis is None:
        axes = tuple(range(ndim_of(x)))
    else:
        axes = tuple(axis) if np.iterable(axis) else (axis,)
    if len(axes) != len(sizes):
        raise ValueError("Must provide matching length window_shape and axis; got "
                         f"{len(sizes)} window_shape elements and {len(axes)} axes elements.")
    axes = tuple(normalize_axis(a, ndim_of(x)) for a in axes)
    if len(set(axes)) != len(axes):
        raise UnsupportedError("sliding_window_view over the same axis twice is not supported")
    windows = ops.sliding_window(x, axes, sizes)
    view_without_steps(x, windows)  # NumPy's windows are a read-only view of x
    if is_traced(windows):
        windows.readonly = True
    return windows


def flip(m, axis=None):
    return ops.flip(m, normalize_axes(axis, ndim_of(m)))


def pad(array, pad_width, mode="constant", **kwargs):
    """np.pad's constant mode with one constant (``-np.inf`` before a padded max pool), and
    the index modes of ``tracer/pad_modes.py``. Its result is always a new array: with zero
    widths ``ops.pad`` gives the array itself, and ``x_pad[...] += ...`` would write into
    the caller's ``x``."""
    allowed = {"constant": {"constant_values"}, "reflect": {"reflect_type"},
               "symmetric": {"reflect_type"}, **dict.fromkeys(pad_modes.STATISTICS,
                                                               {"stat_length"})}.get(mode, set())
    if mode not in ("constant",) + pad_modes.MODES + tuple(pad_modes.STATISTICS):
        raise UnsupportedError(f"np.pad(mode={mode!r}) is not supported; modes 'constant', "
                               "'edge', 'reflect', 'symmetric', 'wrap', 'maximum', 'minimum' "
                               "and 'mean' are")
    if set(kwargs) - allowed:
        raise as_numpy_would(ValueError(f"unsupported keyword arguments for mode '{mode}': "
                                        f"{set(kwargs) - allowed}"))
    pairs = _symbolic_pairs(pad_width, ndim_of(array))
    if mode == "constant" and pairs is not None:  # (np.asarray would make the dims ints)
        fills = [(_pad_constant(array, low), _pad_constant(array, high)) for low, high in
                 pad_modes.constant_pairs(kwargs.get("constant_values", 0), ndim_of(array))]
        return _pad_by_blocks(array, pairs, fills)
    widths = np.broadcast_to(np.asarray(_guarded_ints(pad_width), dtype=object),
                             (ndim_of(array), 2))
    if mode in pad_modes.STATISTICS:
        return pad_modes.pad_by_statistic(array, [(int(low), int(high)) for low, high in widths],
                                          mode, **kwargs)
    if mode != "constant":
        return pad_modes.pad_by_index(array, [(int(low), int(high)) for low, high in widths],
                                      mode, **kwargs)
    fills = [(_pad_constant(array, low), _pad_constant(array, high)) for low, high in
             pad_modes.constant_pairs(kwargs.get("constant_values", 0), ndim_of(array))]
    config = tuple((int(low), int(high), 0) for low, high in widths)
    padded = ops.pad(array, config)
    if padded is array:
        return _new_array(padded)
    if builtins.all(fill == 0 and not np.signbit(fill) for pair in fills for fill in pair):
        return padded
    if len({(fill.item(), np.signbit(fill)) for pair in fills for fill in pair}) > 1:
        # constant_values=((0, 0), (1, 1)) or (0, 255): each axis' own constants
        return pad_modes.fill_pad_regions(padded, shape_of(array), config, fills)
    inside = ops.pad(ops.full(shape_of(array), True, np.bool_, like=array), config)
    return where(inside, padded, fills[0][0])


def _symbolic_pairs(pad_width, ndim):
    """``pad_width`` as ``ndim`` ``(before, after)`` pairs when it is written as one pair per
    axis (``((0, 0), (0, 0), (dh // 2, dh - dh // 2))``) and holds a dim expression, else
    None (the other spellings go through NumPy's own broadcasting of the widths)."""
    if type(pad_width) not in (tuple, list) or len(pad_width) != ndim or not builtins.all(
            type(pair) in (tuple, list) and len(pair) == 2 and builtins.all(
                type(width) is int or isinstance(width, SymInt) for width in pair)
            for pair in pad_width):
        return None
    pairs = [tuple(pair) for pair in pad_width]
    if not builtins.any(isinstance(width, SymInt) for pair in pairs for width in pair):
        return None
    return pairs


def _pad_by_blocks(array, widths, fills):
    """np.pad's constant mode with widths that are dim expressions (a U-Net's ``dh // 2``
    and ``dh - dh // 2`` to reach the skip connection's size): blocks of the constants
    concatenated on each axis, so the widths stay symbolic (``ops.pad`` takes ints: each
    parity of ``dh`` was a variant of its own). NumPy refuses a negative width."""
    padded = array
    for axis, ((low, high), (low_fill, high_fill)) in enumerate(zip(widths, fills)):
        if not (isinstance(low, SymInt) or isinstance(high, SymInt) or low or high):
            continue
        if not (low >= 0 and high >= 0):  # (a shape guard on dims)
            raise as_numpy_would(ValueError("index can't contain negative values"))
        shape = list(shape_of(padded))
        blocks = []
        for width, fill in ((low, low_fill), (high, high_fill)):
            shape[axis] = width
            # (a Python number: the printed IR reads it back; np.float64(0.0) it does not)
            blocks.append(ops.full(tuple(shape), fill.item(), fill.dtype, like=array))
        padded = ops.concatenate((blocks[0], padded, blocks[1]), axis=axis)
    return padded if padded is not array else _new_array(padded)


def _pad_constant(array, constant_values):
    """A constant np.pad writes, cast to the array's dtype as NumPy's assignment casts it;
    ``UnsupportedError`` for a traced one or a fraction into ints."""
    if type(constant_values) in (int, float, bool) or isinstance(constant_values, np.generic):
        value = np.asarray(constant_values)
        dtype = np.dtype(dtype_of(array))
        if value.dtype.kind in "iubf" and (dtype.kind == "f" or (
                value.dtype.kind in "iub" and dtype.kind in "iub")):
            # NumPy's own conversion of the constant: it wraps some out-of-range ints
            # (300 into uint8) and raises OverflowError for others (2**40 into int32)
            try:
                with np.errstate(all="ignore"):
                    return np.pad(np.zeros(1, dtype), 1, constant_values=constant_values)[0]
            except OverflowError as error:
                raise as_numpy_would(error) from None
    raise UnsupportedError(f"np.pad(mode='constant') of a {np.dtype(dtype_of(array))} array "
                           "supports numbers it holds without rounding as constant_values "
                           f"(got {constant_values!r})")


def _guarded_ints(value):
    """``value`` (an int, or tuples and lists of them) with each traced int made its value
    under a guard (a pad width read from a run-time int: ``conv_param["pad"]``)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_guarded_ints(item) for item in value)
    return operator.index(value) if is_traced(value) else value


def tril(m, k=0):
    return where(_band_mask(m, k, lower=True), m, np.zeros((), dtype_of(m)))


def triu(m, k=0):
    return where(_band_mask(m, k, lower=False), m, np.zeros((), dtype_of(m)))


def _band_mask(m, k, lower):
    dims = tuple(shape_of(m)[-2:])
    if not dims:
        raise as_numpy_would(TypeError("tri() missing 1 required positional argument: 'N'"))
    # A vector is a row NumPy's (n, n) mask broadcasts against: np.triu(v) is a matrix.
    rows, cols = dims if len(dims) == 2 else dims * 2
    row = ops.reshape(ops.iota(rows, np.int64, like=m), (rows, 1))
    col = ops.reshape(ops.iota(cols, np.int64, like=m), (1, cols))
    return (col - row <= k) if lower else (col - row >= k)


# --- selection and element-wise composites ----------------------------------------------
def where(condition, x=None, y=None):
    if x is None and y is None:
        return nonzero(condition)
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")
    return bind(ops.where_p, condition, x, y)


def nonzero(a):
    """Data-dependent shape: only eager values (NumPy arrays, Tensors) support it."""
    if is_traced(a):  # (np.asarray would say "converted to a NumPy array": not the reason)
        raise UnsupportedError(
            "np.nonzero (and np.where with one argument) of traced data: how many indices it "
            "gives depends on the data, so it has no shape to compile (non-maximum "
            "suppression's np.where(iou <= t)[0]); keep a mask instead (np.where(mask, x, "
            "fill), x[mask].sum()) or compute it outside")
    return np.nonzero(np.asarray(a))


def round_(a, decimals=0, out=None):
    """``np.round``/``np.around`` as NumPy computes it: ``rint`` (half to even) of ``a``
    scaled by ``10 ** decimals`` in ``a``'s dtype, scaled back; integers are already
    whole unless ``decimals < 0`` (then rounded in float64 and cast back).

    >>> import tracejit as tj
    >>> f = tj.jit(lambda x: np.round(x * 100, 1), cache="memory")
    >>> f(np.array([0.01234, -0.025]))
    array([ 1.2, -2.5])
    """
    decimals = operator.index(decimals)
    whole = np.dtype(dtype_of(a)).kind in "iu"
    if decimals and out is None and np.dtype(dtype_of(a)) == np.bool_:
        # NumPy scales a bool array into an output of its own dtype: its cast error
        check_cast(a, np.zeros((), np.float64), "np.multiply")
    if decimals == 0 or (whole and decimals > 0):
        result = a if whole else np.rint(a)
    else:
        scale = 10.0 ** builtins.abs(decimals)
        if decimals > 0:
            result = np.rint(a * scale) / scale
        else:
            result = np.rint(a / scale) * scale
        if whole:
            result = result.astype(dtype_of(a))
    if out is not None:
        return write_out(out, result, "np.round")
    return result if result is not a else copy(a)


def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None):  # noqa: A002
    low = a_min if a_min is not None else min
    high = a_max if a_max is not None else max
    # NumPy drops a Python int bound past an int array's range that clips nothing (low
    # under it, high over it) and raises OverflowError for one that would clip everything
    if is_traced(a):
        if python_int_past_range(low, dtype_of(a)) < 0:
            low = None
        if python_int_past_range(high, dtype_of(a)) > 0:
            high = None
        if low is None and high is None:
            return copy(a)
    result = a
    # NumPy's clip ufunc keeps x where it equals a bound (clip(-0.0, 0.0, 1.0) is -0.0) in
    # its loop for one-element bounds; its other loop, and np.maximum/np.minimum (one bound
    # given), give the bound. Only a zero's sign tells them apart.
    both = low is not None and high is not None and builtins.all(
        dim == 1 for bound in (low, high) for dim in shape_of(bound))
    if low is not None:
        clipped = np.maximum(result, low)
        result = _keeping_ties(result, low, clipped) if both else clipped
    if high is not None:
        clipped = np.minimum(result, high)
        result = _keeping_ties(result, high, clipped) if both else clipped
    if out is not None:  # np.clip(x, lo, hi, out=x): written through, as NumPy does
        return write_out(out, result, "np.clip")
    return result


def _keeping_ties(x, bound, clipped):
    """``clipped`` (maximum or minimum of ``x`` and ``bound``), but ``x`` where it equals
    ``bound``."""
    if not np.issubdtype(dtype_of(clipped), np.floating) or (
            isinstance(bound, (int, float, np.number)) and bound != 0):
        return clipped
    return np.where(x == bound, x, clipped)


def take(a, indices, axis=None, out=None, mode="raise"):
    no_out("take", out)
    if mode not in ("raise", "clip", "wrap"):
        raise as_numpy_would(ValueError(
            f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})"))
    if axis is None:
        a, axis = ops.reshape(a, (-1,)), 0
    axis = normalize_axis(axis, ndim_of(a))
    if hasattr(indices, "dtype") and (dtype_of(indices) == np.bool_ or np.dtype(
            dtype_of(indices)) in NARROW_POSITIONS):
        indices = astype(indices, np.int64)  # NumPy casts to intp ('safe'): 0 and 1, bytes
    if mode != "raise":
        indices = _index_in_range(indices, shape_of(a)[axis], mode)
    elif hasattr(indices, "dtype") and dtype_of(indices).kind not in "iu":
        raise as_numpy_would(TypeError(f"Cannot cast array data from {dtype_of(indices)} "
                                       "to int64 according to the rule 'safe'"))
    return ops.gather(a, indices, axis=axis)


def _index_in_range(indices, length, mode):
    """``np.take``'s ``mode='clip'`` (past either end: the end; negative indices do not
    count from the end) and ``mode='wrap'`` (modulo the length)."""
    if not hasattr(indices, "shape"):
        indices = np.asarray(indices)
        if indices.size == 0:  # np.take(x, [], mode="clip"): NumPy's intp
            indices = indices.astype(np.intp)
    if dtype_of(indices).kind not in "iu":
        raise as_numpy_would(TypeError(f"Cannot cast array data from {dtype_of(indices)} "
                                       "to int64 according to the rule 'safe'"))
    if length == 0:
        if size_of(shape_of(indices)) != 0:
            raise as_numpy_would(IndexError("cannot do a non-empty take from an empty axes."))
        return indices
    if mode == "clip":
        return np.minimum(np.maximum(indices, 0), length - 1)
    return np.remainder(indices, length)


def take_along_axis(arr, indices, axis):
    """``arr`` gathered along ``axis`` at ``indices`` (same rank, other axes broadcast);
    ``axis=None``: the flattened ``arr`` at 1-d ``indices``, as NumPy."""
    if axis is None:
        if ndim_of(indices) != 1:
            raise as_numpy_would(ValueError(
                "when axis=None, `indices` must have a single dimension."))
        arr, axis = ops.reshape(arr, (-1,)), 0
    axis = normalize_axis(axis, ndim_of(arr))
    ndim = ndim_of(arr)
    index = [
        ops.reshape(
            ops.iota(dim, np.int64, like=arr), tuple(dim if j == i else 1 for j in range(ndim))
        )
        for i, dim in enumerate(shape_of(arr))
    ]
    index[axis] = indices
    return getitem(arr, tuple(index))


def _operand(value):
    """A product's operand as NumPy makes it an array first: a list (word2vec's one-hot
    lists, ``np.dot(x, W1)``; its numbers may be run-time inputs) is its array, and a
    Python number a strong 0-d one (``np.dot(2.0, x32)`` is float64)."""
    if type(value) in (list, tuple) and value:
        return array_of(value)
    return as_array(value)


def dot(a, b, out=None):
    no_out("dot", out)
    a, b = _operand(a), _operand(b)
    if ndim_of(a) == 0 or ndim_of(b) == 0:
        return a * b
    if ndim_of(b) > 2:
        # N-D dot: a's last axis with b's second-to-last; the result keeps every other
        # axis of a, then of b (not matmul's broadcast batch).
        return tensordot(a, b, axes=([-1], [-2]))
    return ops.matmul(a, b)


def outer(a, b, out=None):
    no_out("outer", out)
    a, b = _operand(a), _operand(b)
    return ops.reshape(a, (-1, 1)) * ops.reshape(b, (1, -1))


# --- linalg ----------------------------------------------------------------------------
def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002 - NumPy's names
    """``np.linalg.norm``: vector norms (any ``ord`` but complex), matrix norms ``None``,
    ``'fro'``, 1, -1, inf, -inf; the spectral and nuclear norms (an SVD) are refused."""
    if dtype_of(x).kind not in "f":
        x = astype(x, np.float64)  # NumPy computes norms of integers in float64
    ndim = ndim_of(x)
    if axis is None:
        if ndim == 1 and ord in (None, 2):
            # NumPy's own formula, sqrt(x.dot(x)): its BLAS dot where a decision reads the
            # norm (codegen/numpy_products.py), so NumPy's bits (a power iteration's
            # v = w / norm(w) stays exact from trip to trip: tracer/loop_bounds.py)
            result = np.sqrt(ops.matmul(x, x))
            return ops.reshape(result, (1,)) if keepdims else result
        if ord is None:  # the 2-norm of the flattened array, any rank
            result = np.sqrt(sum(x * x))
            return ops.reshape(result, (1,) * ndim) if keepdims else result
        if ndim not in (1, 2):
            raise ValueError("Improper number of dimensions to norm.")
        axis = tuple(range(ndim))
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    axes = tuple(normalize_axis(a, ndim) for a in axes)
    if len(axes) == 1:
        result = _vector_norm(x, ord, axes[0])
    elif len(axes) == 2:
        if axes[0] == axes[1]:
            raise ValueError("Duplicate axes given.")
        result = _matrix_norm(x, ord, *axes)
    else:
        raise ValueError("Improper number of dimensions to norm.")
    return expand_dims(result, axes) if keepdims else result


def _vector_norm(x, ord, axis):  # noqa: A002
    magnitude = np.abs(x)
    if ord is None or ord == 2:
        return np.sqrt(sum(x * x, axis=axis))
    if ord == np.inf:
        return max(magnitude, axis=axis)
    if ord == -np.inf:
        return min(magnitude, axis=axis)
    if ord == 0:
        # the method: a NumPy scalar stays one (NumPy returns np.float64, not a 0-d array)
        return sum(x != 0, axis=axis).astype(dtype_of(x))
    if ord == 1:
        return sum(magnitude, axis=axis)
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    return sum(magnitude ** ord, axis=axis) ** (1.0 / ord)


def _matrix_norm(x, ord, row_axis, col_axis):  # noqa: A002
    if ord is None or ord == "fro":
        return np.sqrt(sum(x * x, axis=(row_axis, col_axis)))
    magnitude = np.abs(x)
    if ord in (1, -1):  # the largest (smallest) column sum
        columns = sum(magnitude, axis=row_axis)
        col_axis -= col_axis > row_axis
        return (max if ord == 1 else min)(columns, axis=col_axis)
    if ord in (np.inf, -np.inf):  # the largest (smallest) row sum
        rows = sum(magnitude, axis=col_axis)
        row_axis -= row_axis > col_axis
        return (max if ord == np.inf else min)(rows, axis=row_axis)
    if ord in (2, -2, "nuc"):
        raise UnsupportedError(f"np.linalg.norm(ord={ord!r}) needs singular values (an SVD), "
                               "which tracejit does not trace; compute it outside the "
                               "compiled function")
    raise ValueError("Invalid norm order for matrices.")


# --- repeat, tile, roll ----------------------------------------------------------------
def repeat(a, repeats, axis=None):
    """``np.repeat``: an int count broadcasts (no copy until used); per-element counts
    must be concrete (a traced count would make the shape depend on data)."""
    if axis is None:
        a, axis = ops.reshape(a, (-1,)), 0
    axis = normalize_axis(axis, ndim_of(a))
    shape = shape_of(a)
    if isinstance(repeats, SymInt):  # a dim (np.repeat(rows, out_w) in im2col): symbolic
        if repeats < 0:
            raise ValueError("repeats may not contain negative values.")
        return _new_array(_repeat_each(a, shape, axis, repeats))
    if is_traced(repeats) and not shape_of(repeats) and dtype_of(repeats).kind in "iu":
        # np.repeat(k, n_rep) with n_rep a run-time int (grouped-query attention's heads
        # per key): one count decides the shape, so it is specialized under a guard
        repeats = operator.index(repeats)
    if getattr(type(repeats), "__tracejit_priority__", 0):
        raise UnsupportedError("np.repeat with traced repeats: the result's shape would depend "
                               "on data; pass the counts as a Python int or list")
    counts = np.asarray(repeats)
    if counts.dtype.kind not in "iu":
        raise TypeError(f"Cannot cast array data from {counts.dtype} to int64")
    if (counts < 0).any():
        raise ValueError("repeats may not contain negative values.")
    if counts.size == 1:
        return _new_array(_repeat_each(a, shape, axis, int(counts.reshape(()))))
    if counts.ndim != 1 or counts.shape[0] != shape[axis]:
        raise ValueError(f"operands could not be broadcast together with shape "
                         f"({shape[axis]},) ({counts.shape[0]},)")
    return ops.gather(a, np.repeat(np.arange(counts.shape[0]), counts), axis=axis)


def _repeat_each(a, shape, axis, count):
    """Each element along ``axis`` ``count`` times: a broadcast, reshaped."""
    expanded = ops.reshape(a, shape[: axis + 1] + (1,) + shape[axis + 1:])
    tiled = ops.broadcast_to(expanded, shape[: axis + 1] + (count,) + shape[axis + 1:])
    return ops.reshape(tiled, shape[:axis] + (shape[axis] * count,) + shape[axis + 1:])


def tile(A, reps):  # noqa: N803 - NumPy's name
    def count(rep):  # a dim stays symbolic (np.tile(cols, out_h) in im2col)
        return rep if isinstance(rep, SymInt) else int(rep)

    reps = tuple(count(rep) for rep in reps) if np.iterable(reps) else (count(reps),)
    rank = builtins.max(len(reps), ndim_of(A))
    reps = (1,) * (rank - len(reps)) + reps
    shape = (1,) * (rank - ndim_of(A)) + tuple(shape_of(A))
    # (1, s0, 1, s1, ...) broadcast to (r0, s0, r1, s1, ...): the copies are outermost.
    spread = ops.reshape(A, tuple(dim for size in shape for dim in (1, size)))
    spread = ops.broadcast_to(spread, tuple(dim for pair in zip(reps, shape) for dim in pair))
    return _new_array(ops.reshape(spread, tuple(rep * size for rep, size in zip(reps, shape))))


def roll(a, shift, axis=None):
    if axis is None:
        return ops.reshape(roll(ops.reshape(a, (-1,)), shift, 0), shape_of(a))
    if builtins.any(is_traced(amount) and not isinstance(amount, SymInt)
                    for amount in _as_list(shift)):
        return _roll_by_gather(a, shift, axis)
    shifts = np.broadcast_to(np.asarray(shift, dtype=object), np.broadcast(
        np.asarray(shift, dtype=object), np.asarray(axis, dtype=object)).shape)
    axes = np.broadcast_to(np.asarray(axis, dtype=object), shifts.shape)
    total = {}
    for amount, each in zip(shifts.reshape(-1), axes.reshape(-1)):
        each = normalize_axis(int(each), ndim_of(a))
        total[each] = total.get(each, 0) + int(amount)
    for each, amount in total.items():
        length = shape_of(a)[each]
        if isinstance(length, int) and length == 0:
            continue
        amount = amount % length
        if isinstance(amount, int) and amount == 0:
            continue
        a = ops.concatenate([_take_range(a, each, length - amount, length),
                             _take_range(a, each, 0, length - amount)], axis=each)
    return a


def _roll_by_gather(a, shift, axis):
    """``np.roll`` by a shift known at run time only (a Python int argument that changes
    between calls): element ``i`` of each rolled axis is element ``(i - shift) % n``, a
    gather, so one compiled program serves every shift."""
    shifts, axes = _as_list(shift), _as_list(axis)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    elif len(axes) == 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise as_numpy_would(ValueError("'shift' and 'axis' should be scalars or 1D sequences"))
    total = {}
    for amount, each in zip(shifts, axes):
        if is_traced(amount) and (ndim_of(amount) or dtype_of(amount).kind not in "iu"):
            raise UnsupportedError("np.roll by a traced shift that is not an integer scalar "
                                   "is not supported")
        each = normalize_axis(operator.index(each), ndim_of(a))
        total.setdefault(each, []).append(amount)
    for each, amounts in total.items():
        length = shape_of(a)[each]
        if isinstance(length, int) and length == 0:
            continue
        # each shift reduced first: a shift near -2**63, or two summed, would wrap in int64
        amount = builtins.sum(np.remainder(amount, length) for amount in amounts)
        positions = ops.iota(length, np.int64, like=a)
        a = ops.gather(a, np.remainder(positions - amount, length), axis=each)
    return a


def copy(a, order="K", subok=False):
    # A cast to its own dtype: a new array for Tensors, a no-op that codegen folds.
    if order == "F" and ndim_of(a) > 1:
        # NumPy's copy is Fortran-ordered, which its matmul hands to BLAS transposed: the
        # transpose of a copy of the reversed axes, so that margin_rules sees the layout
        # (as a C-ordered copy it took compiled code's other sums as NumPy's product)
        axes = tuple(reversed(range(ndim_of(a))))
        return ops.transpose(bind(ops.cast_p, ops.transpose(a, axes), dtype=dtype_of(a)),
                             axes)
    return bind(ops.cast_p, a, dtype=dtype_of(a))


def astype(x, dtype, copy=True, **_):
    # NumPy's astype copies unless told not to, even to the array's own dtype: a write into
    # the result must not reach ``x``.
    if copy and np.dtype(dtype) == dtype_of(x):
        return bind(ops.cast_p, x, dtype=dtype_of(x))  # as ``copy`` (the argument hides it)
    return cast(x, dtype)


# --- creation with a template ----------------------------------------------------------
def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    shape = shape_of(a) if shape is None else shape
    dtype = dtype if dtype is not None else dtype_of(a)
    if is_traced(fill_value):
        return _filled(shape, fill_value, dtype)
    return ops.full(shape, fill_value, dtype, like=a)


def full(shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    """``np.full`` with a traced fill value (a mean, a Python float argument that changes
    between calls): the value broadcast to ``shape``, as NumPy's ``copyto`` does, in
    ``dtype`` (by default the value's own: a Python float is float64).

    >>> import tracejit as tj
    >>> tj.jit(lambda x: x - np.full(x.shape, x.mean()), cache="memory")(np.arange(3.0))
    array([-1.,  0.,  1.])
    """
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    # np.full((n, k), v) with k a run-time Python int: a size is an int, so k is specialized
    shape = tuple(dim if isinstance(dim, SymInt) or not is_traced(dim) else
                  operator.index(dim) for dim in shape)
    if dtype is None:
        dtype = dtype_of(fill_value) if is_traced(fill_value) else np.asarray(fill_value).dtype
    if not is_traced(fill_value):
        return ops.full(shape, fill_value, dtype, like=like)
    return _filled(shape, fill_value, dtype)


def _filled(shape, value, dtype):
    """``value`` cast to ``dtype`` (unsafely, as ``np.copyto`` into the new array does) and
    broadcast to ``shape``: a new array, so writes into it leave ``value`` alone."""
    if builtins.any(dim < 0 for dim in shape):
        raise as_numpy_would(ValueError("negative dimensions are not allowed"))
    keep_python_int_in_range(value, dtype)
    spread = ops.broadcast_to(bind(ops.cast_p, value, dtype=np.dtype(dtype)), tuple(shape))
    return copy(spread)


def zeros_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return full_like(a, 0, dtype=dtype, shape=shape)


def ones_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return full_like(a, 1, dtype=dtype, shape=shape)


def empty_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    # Zeros, not garbage: compiled and eager runs must agree bit for bit.
    return full_like(a, 0, dtype=dtype, shape=shape)


def eye(N, M=None, k=0, dtype=float, order="C", *, device=None, like=None):
    return astype(diagonal_offsets(N, M, like) == k, dtype)


def identity(n, dtype=None, *, like=None):
    return eye(n, dtype=float if dtype is None else dtype, like=like)


def tri(N, M=None, k=0, dtype=float, *, like=None):
    """``np.tri``: ones on and below the ``k``-th diagonal. With a symbolic ``N`` (the
    causal mask ``1 - np.tri(x.shape[0])`` of a GPT) the mask keeps the dim symbolic
    instead of specializing the sequence length."""
    return astype(diagonal_offsets(N, M, like) <= k, dtype)


def arange(start, stop=None, step=1, dtype=None, like=None):
    if stop is None:
        start, stop = 0, start
    bounds = (start, stop, step)
    symbolic = [bound for bound in bounds if hasattr(bound, "__tracejit_dim__")]
    if symbolic and not builtins.all(_whole_bound(bound) for bound in bounds):
        # np.arange(0, n, 0.5): the length is ceil of a float quotient; one per length
        bounds = start, stop, step = tuple(int(bound) if hasattr(bound, "__tracejit_dim__")
                                           else bound for bound in bounds)
        symbolic = []
    if symbolic:
        # np.arange(1.0, n + 1): float bounds holding whole numbers count as ints do. The
        # dtype is NumPy's: arange makes each bound an array, so an int is int64, not weak
        # (np.arange(np.float32(1), n) is float64)
        if dtype is None:
            dtype = np.result_type(*(np.asarray(0 if hasattr(bound, "__tracejit_dim__")
                                                else bound) for bound in bounds))
        start, stop, step = (bound if hasattr(bound, "__tracejit_dim__") else
                             operator.index(bound) if _is_integer(bound) else int(bound)
                             for bound in bounds)
        # Integer bounds from symbolic dims: the length stays symbolic too.
        like = like if like is not None else symbolic[0]
        dtype = np.dtype(dtype)
        span = stop - start
        length = (span + step - 1) // step if step > 0 else (-span - step - 1) // -step
        length = length if length > 0 else 0
    else:
        dtype = np.result_type(*bounds) if dtype is None else np.dtype(dtype)
        length = builtins.max(math.ceil((stop - start) / step), 0)
    values = ops.iota(length, np.int64, like=like)
    if step != 1:
        values = values * step
    if start != 0:
        values = values + start
    return astype(values, dtype)


def _is_integer(bound):
    return isinstance(bound, (int, np.integer)) and not isinstance(bound, (bool, np.bool_))


def _whole_bound(bound):
    """A bound ``np.arange`` can count with symbolic dims: a dim, an int, or a finite float
    holding a whole number (``1.0``) small enough that float arithmetic on it is exact."""
    if hasattr(bound, "__tracejit_dim__") or _is_integer(bound):
        return True
    return (isinstance(bound, (float, np.floating)) and math.isfinite(bound)
            and float(bound).is_integer() and builtins.abs(bound) < 2.0**52)


# --- shape queries ---------------------------------------------------------------------
def shape(a):
    return tuple(shape_of(a))


def ndim(a):
    return ndim_of(a)


def size(a, axis=None):
    return size_of(shape_of(a)) if axis is None else shape_of(a)[axis]


FUNCTIONS = {
    np.sum: sum,
    np.prod: prod,
    np.max: max,
    np.amax: max,
    np.min: min,
    np.amin: min,
    np.any: any,
    np.all: all,
    np.argmax: argmax,
    np.argmin: argmin,
    np.count_nonzero: count_nonzero,
    np.mean: mean,
    np.var: var,
    np.std: std,
    np.nansum: nansum,
    np.nanprod: nanprod,
    np.nanmax: nanmax,
    np.nanmin: nanmin,
    np.nanargmax: nanargmax,
    np.nanargmin: nanargmin,
    np.nanmean: nanmean,
    np.nanvar: nanvar,
    np.nanstd: nanstd,
    np.nancumsum: nancumsum,
    np.nan_to_num: nan_to_num,
    np.diagflat: diagflat,
    np.diag: diag,
    np.unravel_index: unravel_index,
    np.ravel_multi_index: ravel_multi_index,
    np.reshape: reshape,
    np.transpose: transpose,
    np.swapaxes: swapaxes,
    np.moveaxis: moveaxis,
    np.expand_dims: expand_dims,
    np.squeeze: squeeze,
    np.ravel: ravel,
    np.broadcast_to: broadcast_to,
    np.concatenate: concatenate,
    np.stack: stack,
    np.hstack: hstack,
    np.vstack: vstack,
    np.atleast_1d: atleast_1d,
    np.atleast_2d: atleast_2d,
    np.atleast_3d: atleast_3d,
    np.broadcast_arrays: broadcast_arrays,
    np.array_equal: array_equal,
    np.array_equiv: array_equiv,
    np.split: split,
    np.array_split: array_split,
    np.flip: flip,
    np.lib.stride_tricks.sliding_window_view: sliding_window_view,
    np.pad: pad,
    np.tril: tril,
    np.triu: triu,
    np.where: where,
    np.nonzero: nonzero,
    np.clip: clip,
    np.round: round_,
    np.around: round_,
    np.take: take,
    np.take_along_axis: take_along_axis,
    np.dot: dot,
    np.outer: outer,
    np.einsum: einsum,
    np.tensordot: numpy_tensordot,
    np.linalg.norm: norm,
    np.repeat: repeat,
    np.tile: tile,
    np.roll: roll,
    np.cumsum: cumsum,
    np.cumprod: cumprod,
    np.sort: sort,
    np.argsort: argsort,
    np.copy: copy,
    np.astype: astype,
    np.arange: arange,  # np.arange(n, like=x): n may be a symbolic dim (runtime/nn.py)
    np.full_like: full_like,
    np.zeros_like: zeros_like,
    np.ones_like: ones_like,
    np.empty_like: empty_like,
    np.shape: shape,
    np.ndim: ndim,
    np.size: size,
    np.diagonal: diagonal,
    np.trace: trace,
    np.fill_diagonal: fill_diagonal,
    np.copyto: copyto,
}
# The composites that live in modules of their own, each with its table.
for _module in (array_reshaping, choices, correlations, counting, even_spacing,
                finite_differences, math_composites, products, searching, statistics):
    FUNCTIONS.update(_module.FUNCTIONS)
UFUNC_COMPOSITES.update(math_composites.COMPOSITES)


def array_function(func, args, kwargs):
    """The body of ``__array_function__`` for tracejit arrays."""
    implementation = FUNCTIONS.get(func)
    if implementation is None:
        name = getattr(func, "__name__", repr(func))
        module = getattr(func, "__module__", "numpy") or "numpy"
        module = "np" if module == "numpy" else module.replace("numpy", "np")
        raise UnsupportedError(
            f"{module}.{name} is not supported by tracejit yet (no primitive or composition "
            "for it); convert with .numpy() for plain NumPy, or write it with supported ops"
        )
    result = implementation(*args, **kwargs)
    if func in NEW_VIEWS and args:
        # np.reshape(x, x.shape) is another array than x in NumPy (x.reshape too): an ``is``
        # between them, or both returned, must see two objects
        from .array_methods import a_new_view  # cycle: array_methods imports this module

        result = a_new_view(args[0], result)
    return result


# NumPy's functions that return a new view even where nothing changes (np.squeeze,
# np.real and np.asarray return the array itself there)
NEW_VIEWS = frozenset({np.reshape, np.moveaxis, np.swapaxes, np.rollaxis, np.transpose,
                       np.permute_dims, np.matrix_transpose, np.ravel})

