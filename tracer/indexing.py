"""NumPy indexing (``x[index]``) composed from primitives.

Basic indexing (ints, slices with any step, ``None``, ``...``) becomes ``slice`` (positive
steps), ``flip`` (negative steps) and ``reshape``; integer arrays and boolean masks become
one ``gather`` over the indexed axes, flattened when there are several, with NumPy's rule
for where the broadcast index dimensions land. Dims may be symbolic, so bounds are
computed with plain comparisons rather than ``slice.indices``.

>>> getitem(np.arange(10), slice(None, None, -3)).tolist()
[9, 6, 3, 0]
>>> getitem(np.arange(6).reshape(2, 3), (np.array([1, 0]), np.array([2, 2]))).tolist()
[5, 2]
"""

from __future__ import annotations

import operator

import numpy as np

from . import ops
from .dims import SymInt, SymRange, is_int, surely, value_of
from .errors import TraceError, UnsupportedError, UnsupportedIndexError, as_numpy_would
from .locations import line_prefix, user_location
from .ops import ndim_of, shape_of
from .pending import deferred, is_pending, recording_only
from .primitives import any_traced, current_context, is_traced
from .shapes import broadcast_shapes, size_of

# Integer index dtypes compiled code does not compute in, all exact in int64.
NARROW_POSITIONS = frozenset(map(np.dtype, (np.int8, np.int16, np.uint8, np.uint16, np.uint32)))


def _is_integer(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_array(value):
    return hasattr(value, "shape") and hasattr(value, "dtype") and not _is_integer(value)


def _index_error(index, axis, dim):
    return IndexError(f"index {index} is out of bounds for axis {axis} with size {dim}")


def _clamp(value, low, high):
    """``value`` clipped to ``[low, high]``. A dim that is ``high`` or past it for every size
    of the bucket clips without a guard, though ``value > high`` is open: the last of
    np.array_split-like chunks, ``x[2*c : 3*c]`` with ``c = (n + 2) // 3``, stops at ``n``
    or past it by ``n % 3`` (``3*c > n`` guarded would give two programs per bucket)."""
    if surely(value, ">=", high):
        return high
    if surely(value, "<=", low):
        return low
    return low if value < low else high if value > high else value


def normalize_slice(entry, dim):
    """``(start, limit, step, flipped)`` with ``step > 0`` selecting what ``entry`` selects
    from an axis of length ``dim``, in reverse order when ``flipped``."""
    step = 1 if entry.step is None else operator.index(entry.step)
    if step == 0:
        raise ValueError("slice step cannot be zero")

    def bound(value, default, low, high):
        if value is None:
            return default
        if not (isinstance(value, int) or hasattr(value, "__tracejit_dim__")):
            value = operator.index(value)  # a traced int: Python needs it (an index guard)
        value = value + dim if value < 0 else value
        return _clamp(value, low, high)

    if step > 0:
        start = bound(entry.start, 0, 0, dim)
        limit = _unclipped_limit(entry.stop, start, step, dim)
        if limit is None:
            limit = bound(entry.stop, dim, 0, dim)
        return start, (limit if limit > start else start), step, False
    start = bound(entry.start, dim - 1, -1, dim - 1)
    stop = bound(entry.stop, -1, -1, dim - 1)
    count = (start - stop - step - 1) // -step if start > stop else 0
    if count == 0:
        return 0, 0, 1, False
    return start - (count - 1) * -step, start + 1, -step, True


def _unclipped_limit(stop, start, step, dim):
    """One past the last element ``range(start, stop, step)`` selects when, for every size
    of the bucket, that element lies inside ``dim`` (so clipping ``stop`` to ``dim``
    selects the same elements), else None. im2col's ``xp[y : y + 2*oh : 2]`` stops past
    the padded size or not by the size's parity, with the same elements either way:
    clipping would guard the parity and compile each bucket up to four times."""
    if step == 1 or not isinstance(stop, SymInt) and not isinstance(dim, SymInt):
        return None
    if not (is_int(stop) and surely(stop, ">", start) and surely(start, ">=", 0)):
        return None
    last = start + (stop - start - 1) // step * step
    return last + 1 if surely(last, "<", dim) else None


def _expand(index, ndim):
    """The index as a list of entries, one per indexed axis (plus ``None``s); Ellipsis
    expanded, lists made arrays, boolean masks turned into their integer positions."""
    if not isinstance(index, tuple):
        index = (index,)
    entries = []
    for entry in index:
        if isinstance(entry, range):  # NumPy reads a range as the integers it holds
            entry = np.arange(entry.start, entry.stop, entry.step)
        if isinstance(entry, list) and any_traced(entry):
            # wte[ids] with ids a list of run-time Python ints (picoGPT's prompt, ids
            # appended by int(np.argmax(...))): the integer array NumPy makes of it
            from .numpy_api import array_of  # numpy_api builds on this module

            entry = array_of(entry)
        elif isinstance(entry, list):
            # A dim in the list ([0, n - 1]) is the int it is in this call (guarded).
            entry = np.asarray([int(item) if isinstance(item, SymInt) else item
                                for item in entry])
            if entry.dtype == object:
                raise IndexError("only integers, slices, None, Ellipsis and integer or "
                                 "boolean arrays are valid indices")
            if entry.size == 0:  # NumPy reads [] as an empty integer index
                entry = entry.astype(np.intp)
        if entry is True or (isinstance(entry, np.bool_) and entry):
            entry = None  # x[True] is x[None]: a 0-d mask that keeps everything
        if _is_array(entry) and np.dtype(entry.dtype) == np.bool_:
            entries.append(("mask", _concrete_mask(entry)))
        else:
            entries.append(entry)
    used = sum(
        ndim_of(entry[1]) if isinstance(entry, tuple) else 1
        for entry in entries
        if entry is not None and entry is not Ellipsis
    )
    if used > ndim:
        raise IndexError(
            f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed"
        )
    ellipses = sum(entry is Ellipsis for entry in entries)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    expanded = []
    for entry in entries:
        if entry is Ellipsis:
            expanded.extend([slice(None)] * (ndim - used))
        elif isinstance(entry, tuple):
            # A k-d mask covers k axes: one integer index array per axis.
            expanded.extend(("mask", positions) for positions in np.nonzero(entry[1]))
        else:
            expanded.append(entry)
    if not ellipses:
        expanded.extend([slice(None)] * (ndim - used))
    return [entry[1] if isinstance(entry, tuple) else entry for entry in expanded]


def _concrete_mask(mask):
    """A boolean mask's values decide the result's shape, so they must be concrete: masks
    of traced data are refused; a mask read from outside the function is an implicit input
    whose values the trace guards."""
    if is_traced(mask):
        context = current_context()
        outside = context.outside_array(mask) if context is not None else None
        if outside is not None:  # an outside mask, read as an implicit input
            context.guard_contents(outside)
            return outside
        where = line_prefix(user_location())
        raise TraceError(
            f"{where}indexing with a boolean mask computed from traced data gives a "
            "data-dependent shape; use np.where(mask, x, 0) (or compute it outside the "
            "compiled function)"
        )
    context = current_context()
    if context is not None and isinstance(mask, np.ndarray):
        context.guard_contents(mask)
    return mask


def _check_mask_shape(index, shape):
    axis = 0
    for entry in index if isinstance(index, tuple) else (index,):
        if entry is None:
            continue
        if entry is Ellipsis:
            return  # masks after an ellipsis are checked by np.nonzero's shapes below
        if _is_array(entry) and np.dtype(entry.dtype) == np.bool_:
            for k, mask_dim in enumerate(shape_of(entry)):
                if axis + k < len(shape) and mask_dim != shape[axis + k]:
                    raise IndexError(
                        f"boolean index did not match indexed array along axis {axis + k}; "
                        f"size of axis is {shape[axis + k]} but size of corresponding boolean "
                        f"axis is {mask_dim}"
                    )
            axis += ndim_of(entry)
        else:
            axis += 1


class IndexPlan:
    """How ``x[index]`` is built: ``slice`` (positive steps), ``flip``, ``reshape`` (drop
    int axes, add ``None`` axes), then a gather for integer arrays at ``advanced``
    ``(position, source_axis, index)`` entries. ``setitem`` runs it backwards."""

    def __init__(self, shape, index):
        index = _ranges_as_arrays(index)
        _check_mask_shape(index, shape)
        entries = _expand(index, len(shape))
        has_arrays = any(_is_array(entry) for entry in entries)
        if has_arrays:  # back[t + 1, path[t + 1]]: beside arrays, an int is an array index
            entries = [ops.bind(ops.cast_p, entry, dtype=np.dtype(np.int64))
                       if isinstance(entry, SymInt) else entry for entry in entries]
        self.shape = shape
        self.starts, self.limits, self.steps, self.flipped = [], [], [], []
        sliced_shape, new_shape, self.advanced = [], [], []
        axis = 0
        for entry in entries:
            if entry is None:
                new_shape.append(1)
                continue
            dim = shape[axis]
            if isinstance(entry, slice):
                start, limit, step, flip = normalize_slice(entry, dim)
                if flip:
                    self.flipped.append(axis)
                new_shape.append(ops.slice_length(start, limit, step))
            elif _is_integer(entry) and not has_arrays:
                position = int(entry) + dim if entry < 0 else int(entry)
                if not 0 <= position < dim:
                    raise _index_error(int(entry), axis, dim)
                start, limit, step = position, position + 1, 1
            elif isinstance(entry, SymInt) and not has_arrays:
                # x[T - 1], x[t] at a reversed loop's first step: a dim-valued position is
                # a slice of one element at a symbolic start (its bounds guarded or decided)
                position = entry + dim if entry < 0 else entry
                if not (position >= 0 and position < dim):
                    raise _index_error(entry.value, axis, value_of(dim))
                start, limit, step = position, position + 1, 1
            elif _is_integer(entry) or _is_array(entry):
                if _is_array(entry) and np.dtype(entry.dtype).kind not in "iu":
                    # Checked here: eager gather would fail later inside np.take.
                    raise IndexError(
                        "arrays used as indices must be of integer (or boolean) type, "
                        f"not {np.dtype(entry.dtype)}"
                    )
                if _is_array(entry) and np.dtype(entry.dtype) in NARROW_POSITIONS:
                    # uint8 labels (MNIST's idx files): NumPy indexes with their intp
                    # values; compiled code would compute the bounds check in uint8
                    entry = ops.bind(ops.cast_p, entry, dtype=np.dtype(np.int64)) if (
                        is_traced(entry)) else np.asarray(entry, np.int64)
                start, limit, step = 0, dim, 1
                self.advanced.append((len(new_shape), axis, entry))
                new_shape.append(dim)
            else:
                raise IndexError(
                    "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) "
                    f"and integer or boolean arrays are valid indices, not {type(entry).__name__}"
                )
            self.starts.append(start)
            self.limits.append(limit)
            self.steps.append(step)
            sliced_shape.append(ops.slice_length(start, limit, step))
            axis += 1
        self.new_shape = tuple(new_shape)
        self.sliced_shape = tuple(sliced_shape)
        self.static = all(type(dim) is int for dim in (*shape, *self.sliced_shape))
        if self.static:  # which steps are no-ops, decided once (cached plans reuse this)
            self.slices = tuple(self.sliced_shape) != tuple(shape) or any(
                not surely(start, "==", 0) for start in self.starts)
            self.reshapes = self.new_shape != self.sliced_shape

    def result_shape(self):
        """The shape of ``x[index]``."""
        if not self.advanced:
            return self.new_shape
        positions = [position for position, _, _ in self.advanced]
        index_shape = broadcast_shapes(*(tuple(shape_of(index)) for _, _, index in self.advanced))
        rest = [dim for axis, dim in enumerate(self.new_shape) if axis not in positions]
        if positions != list(range(positions[0], positions[0] + len(positions))):
            return index_shape + tuple(rest)
        first = positions[0]
        return tuple(rest[:first]) + index_shape + tuple(rest[first:])

    def pad_config(self):
        """The ``pad`` that puts a sliced block back in place (``slice``'s transpose)."""
        config = []
        for dim, count, start, step in zip(self.shape, self.sliced_shape, self.starts, self.steps):
            used = (count - 1) * step + 1 if count else 0
            config.append((start, dim - start - used, step - 1))
        return tuple(config)


def written_region(x, index):
    """``((low, high) per axis)`` covering what ``x[index] = v`` writes, for basic indexing
    (ints, slices, ``None``, ``...``); None otherwise (arrays, masks, traced positions)."""
    try:
        plan = _plan(tuple(shape_of(x)), index)
    except Exception:  # the write itself raises the user's error
        return None
    if plan.advanced:
        return None
    return tuple(zip(plan.starts, plan.limits))


def apart(region, other):
    """Whether two regions of one array provably share no element (on some axis, one ends
    before the other starts)."""
    if region is None or other is None or len(region) != len(other):
        return False
    return any(surely(high, "<=", low2) or surely(high2, "<=", low)
               for (low, high), (low2, high2) in zip(region, other))


_PLANS = {}


def _plan_key(shape, index):
    """A hashable key for basic indexing on a static shape, or None (arrays, symbolic)."""
    if not all(type(dim) is int for dim in shape):
        return None
    items = index if isinstance(index, tuple) else (index,)
    key = []
    for item in items:
        if type(item) is int or item is None or item is Ellipsis:
            key.append(item)
        elif type(item) is slice:
            bounds = (item.start, item.stop, item.step)
            if not all(bound is None or type(bound) is int for bound in bounds):
                return None
            key.append(("slice",) + bounds)
        else:
            return None
    return (shape, tuple(key), isinstance(index, tuple))


def _plan(shape, index):
    """The IndexPlan, cached for basic indexing on static shapes (it is pure Python work)."""
    key = _plan_key(shape, index)
    if key is None:
        return IndexPlan(shape, index)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) > 4096:
            _PLANS.clear()
        plan = _PLANS[key] = IndexPlan(shape, index)
    return plan


def getitem(x, index):
    """``x[index]`` with NumPy's semantics, built from primitives."""
    mask = index[0] if type(index) is tuple and index else index
    if is_traced(mask):
        # x[traced_mask]: a data-dependent length, kept lazy for reductions to consume
        from .masked_selection import select  # cycle: masked_selection -> numpy_api -> indexing

        selection = select(x, index)
        if selection is not None:
            return selection
    plan = _plan(tuple(shape_of(x)), index)
    if plan.static:
        result = x
        if plan.slices:
            result = ops.bind(ops.slice_p, result, starts=tuple(plan.starts),
                              limits=tuple(plan.limits), steps=tuple(plan.steps))
        if plan.flipped:
            result = ops.bind(ops.flip_p, result, axes=tuple(plan.flipped))
        if plan.reshapes:
            result = ops.bind(ops.reshape_p, result, shape=plan.new_shape)
    else:
        result = ops.slice_axes(x, plan.starts, plan.limits, plan.steps)
        result = ops.flip(result, plan.flipped)
        result = ops.reshape(result, plan.new_shape)
    return _gather_advanced(result, plan.advanced) if plan.advanced else result


def setitem(x, index, value):
    """``x`` after ``x[index] = value``, as a new array.

    NumPy's assignment semantics (``value`` broadcast to the selection and cast to ``x``'s
    dtype), built from primitives: the value is scattered into place by running
    ``getitem``'s plan backwards, and a mask built the same way selects it over ``x``.
    """
    if isinstance(value, (list, tuple)) and any_traced(value):
        value = _sequence_value(value, x.dtype)
    masked = _masked_fill(x, index, value)
    if masked is not None:
        return masked
    _check_converts_as_numpy(value, x.dtype)
    plan = IndexPlan(tuple(shape_of(x)), index)
    if not plan.advanced:
        keep_numpy_scalar_in_range(value, x.dtype)
    if isinstance(value, SymInt) and plan.advanced:
        # x[idx[t]] = t + 100 in a captured loop: the index (a dim) as the trace's int, since
        # an index array's scatter takes arrays
        value = ops.bind(ops.cast_p, value, dtype=np.dtype(np.int64), weak=True)
    selected_shape = plan.result_shape()
    assigned = value
    # The mask and the scattered value span the whole of x (a loop's hs[:, t] = h: the
    # whole buffer, three times per trip): recorded, computed only if something reads them.
    with recording_only():
        value = _broadcast_value(_without_leading_ones(value, len(selected_shape)),
                                 selected_shape, x)
        if getattr(value, "dtype", None) != x.dtype:
            value = ops.bind(ops.cast_p, value, dtype=x.dtype)
        ones = ops.full(selected_shape, True, np.bool_, like=x)
        result = ops.bind(ops.where_p, _scatter(plan, ones), _scatter(plan, value), x)
    if not isinstance(assigned, (list, tuple)):
        _value_by_numpy(result, x, index, assigned)
    return result


# The in-place operators ``update`` builds over the whole array: outside the written region
# they meet the zero padding (``y + 0``, ``y * 0``), whose result is discarded. Division
# and the others stay with ``setitem`` (an integer division by that zero).
_UPDATED_WHOLE = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


def update(x, index, value, operation, updated):
    """``x`` after ``x[index] op= value`` for basic indexing, where ``updated`` is the traced
    ``x[index] op value`` (its dtype NumPy's; its value the one assigned): ``where(region,
    x op pad(value), x)``, or None where that does not apply (then ``setitem``).

    ``setitem``'s form ``where(region, pad(x[index] op value), x)`` reads ``x`` at the
    index shifted into the region and back: a position the kernel cannot tell is the one
    its other read of ``x`` uses, so updates of overlapping regions in a row (col2im's
    ``dx[:, :, i:i + H, j:j + W] += cols[:, :, i, j]``, overlap-add) inlined each earlier
    update twice: a kernel that doubled with every update (a 3x3 col2im: 13 s of
    compile). Here ``x`` is read where it is written, once.

    >>> update(np.zeros(4), slice(1, 3), np.ones(2), "add", np.ones(2)).tolist()
    [0.0, 1.0, 1.0, 0.0]
    """
    ufunc = _UPDATED_WHOLE.get(operation)
    if ufunc is None or not _is_basic(index) or ndim_of(x) == 0:
        return None
    plan = IndexPlan(tuple(shape_of(x)), index)
    if plan.advanced:
        return None
    keep_numpy_scalar_in_range(updated, x.dtype)  # x[0] += v: x[0] + v stored by int()
    if isinstance(value, (list, tuple)):  # x[1:3] += [1, 2]: NumPy's array of it
        if any_traced(value):
            return None
        value = np.asarray(value)
    with recording_only():
        if ndim_of(value) == 0:  # a number or 0-d array: no padding (NumPy's promotion)
            whole = ufunc(x, value)
        else:
            block = ops.broadcast_to(value, plan.result_shape())
            whole = ufunc(x, _scatter(plan, block))
        if whole.dtype != updated.dtype:
            return None
        if whole.dtype != x.dtype:
            whole = ops.bind(ops.cast_p, whole, dtype=x.dtype)
        ones = ops.full(plan.result_shape(), True, np.bool_, like=x)
        result = ops.bind(ops.where_p, _scatter(plan, ones), whole, x)
    _value_by_numpy(result, x, index, updated)
    return result


def _is_basic(index):
    """Ints, dims, slices (of ints and dims), ``None`` and ``...``: no arrays, no bools."""
    for entry in index if isinstance(index, tuple) else (index,):
        if isinstance(entry, slice):
            bounds = (entry.start, entry.stop, entry.step)
            if not all(bound is None or _is_position(bound) for bound in bounds):
                return False
        elif not (entry is None or entry is Ellipsis or _is_position(entry)):
            return False
    return True


def _is_position(entry):
    return isinstance(entry, (int, np.integer, SymInt)) and not isinstance(entry, (bool, np.bool_))


def _value_by_numpy(result, x, index, assigned):
    """Give ``result`` (``x`` after ``x[index] = assigned``) the value NumPy's assignment
    into a copy makes, when first read, if ``x`` or the value is itself pending or a loop
    is being traced (a buffer written at every trip, ``hs[:, t] = h``, is read by nothing
    while tracing; each copy of it costs). Left to the recorded equations when the index
    is nothing NumPy reads."""
    if not hasattr(result, "lazy_value"):
        return
    try:
        numpy_index = _as_numpy(index)
    except _NotNumPy:
        return
    operands = [_lazy(x), numpy_index, _lazy(assigned)]
    context = current_context()
    if getattr(context, "in_loop_body", 0) or any(is_pending(op) for op in operands):
        result.value = deferred(_assign, operands, [is_traced(x), True, is_traced(assigned)])
    else:
        result.value = _assign(*operands)


def _assign(target, index, value):
    result = np.array(target)
    result[index] = value
    return result


def _lazy(value):
    """A value to assign: a traced one's value (maybe pending), a dim's int, else itself."""
    if hasattr(value, "lazy_value"):
        return value.lazy_value()
    return value_of(value) if isinstance(value, SymInt) else value


class _NotNumPy(Exception):
    pass


def _as_numpy(index):
    """``index`` with traced arrays and dims replaced by their values, as NumPy reads it
    (``_NotNumPy`` when it holds something else)."""
    if isinstance(index, tuple):
        return tuple(_as_numpy(part) for part in index)
    if isinstance(index, list):
        return [_as_numpy(part) for part in index]
    if isinstance(index, slice):
        return slice(*(_as_numpy(bound) for bound in (index.start, index.stop, index.step)))
    if isinstance(index, SymRange):
        return np.arange(*(value_of(bound) for bound in index.bounds))
    if isinstance(index, SymInt):
        return value_of(index)
    if is_traced(index) and hasattr(index, "lazy_value"):
        return np.asarray(index.value)
    if index is None or index is Ellipsis or isinstance(
        index, (bool, int, np.bool_, np.integer, np.ndarray)
    ):
        return index
    raise _NotNumPy(type(index).__name__)


def _sequence_value(value, dtype):
    """The array NumPy makes of a list or tuple of traced values it assigns
    (``state[i][:3] = (x, num, den)``, RWKV's recurrent state written from a returned
    tuple): their stack. Refused (eager) where NumPy's conversion into ``dtype`` is not a
    plain cast: a float into an integer array goes through ``int()``, which raises at NaN
    where a cast wraps."""
    from .numpy_api import array_of  # numpy_api builds on this module

    stacked = array_of(list(value))
    if not np.can_cast(stacked.dtype, dtype, "same_kind"):
        raise UnsupportedError(f"{line_prefix(user_location())}assigning a list of traced "
                               f"{stacked.dtype} values into a {np.dtype(dtype)} array "
                               "(NumPy converts each with int() or bool(), which raise where "
                               "a compiled cast would not)")
    pending = list(value)
    while pending:  # out[0] = [x.sum(), x[0]] into int32: each NumPy scalar through int()
        item = pending.pop()
        if type(item) in (list, tuple):
            pending.extend(item)
        else:
            keep_numpy_scalar_in_range(item, dtype)
    return stacked


def _without_leading_ones(value, ndim):
    """``value`` without the leading length-1 dims it has beyond the selection's ``ndim``:
    NumPy's assignment drops them (``Y[:, t] = y`` with ``y = Wout @ v`` of shape (1, 1)
    into a (1,) column, the generative loop of an echo state network), where broadcasting
    alone would refuse. An element (``out[f, y, x] = v``) takes no array, even of size 1:
    NumPy raises there, and so does the broadcast."""
    shape = tuple(shape_of(value))
    extra = len(shape) - ndim
    if ndim == 0 or extra <= 0 or any(type(dim) is not int or dim != 1 for dim in shape[:extra]):
        return value
    if isinstance(value, np.ndarray):
        return value.reshape(shape[extra:])
    return ops.reshape(value, shape[extra:])


def _broadcast_value(value, shape, x):
    """``value`` broadcast to the selection's ``shape``. A constant (``m[:, 0] = 0``) is
    cast to ``x``'s dtype as NumPy casts it and broadcast by ``x``'s handler, so a symbolic
    dim of the selection stays symbolic instead of being read as a number (a new compile
    for each size)."""
    if isinstance(value, (bool, int, float, complex, np.generic, np.ndarray)):
        value = np.asarray(value).astype(x.dtype, copy=False)
        if any(isinstance(dim, SymInt) for dim in shape):
            return ops.bind(ops.broadcast_to_p, value, shape=tuple(shape), like=x)
    return ops.broadcast_to(value, shape)


def _masked_fill(x, index, value):
    """``x[mask] = scalar`` with a boolean ``mask`` over ``x``'s leading dims is
    ``where(mask, scalar, x)``: no data-dependent shape, so traced masks work too; so is
    ``x[mask] = y[mask]`` (``where(mask, y, x)``), and a scalar written through a mask
    over later dims after full slices or an Ellipsis (a GPT's causal mask over a batch of
    heads, ``att[:, :, mask] = -np.inf``). None for any other assignment."""
    placed = _placed_mask(index, ndim_of(x))
    if placed is None:
        return None
    before, mask = placed
    shape, mask_shape = tuple(shape_of(x)), tuple(shape_of(mask))
    if before + len(mask_shape) > len(shape) or any(
        dim is not other and dim != other for dim, other in zip(mask_shape, shape[before:])
    ):
        return None  # NumPy raises its IndexError through the general path
    # cycle: masked_selection -> numpy_api -> indexing
    from .masked_selection import MaskedSelection, assign_selection

    if isinstance(value, MaskedSelection):
        # x[m] = y[m], x[m] *= 0.5: a selection by the same mask lines up with x[m]
        return assign_selection(x, mask, value) if before == 0 else None
    if ndim_of(value) != 0:
        return None  # values for each selected element: a data-dependent count
    if isinstance(value, (bool, int, float, np.generic)):
        value = np.dtype(x.dtype).type(value)  # NumPy casts the value to x's dtype
    elif getattr(value, "dtype", None) != x.dtype:
        _check_converts_as_numpy(value, x.dtype)
        value = ops.bind(ops.cast_p, value, dtype=x.dtype)
    after = len(shape) - before - len(mask_shape)
    mask = ops.reshape(mask, (1,) * before + mask_shape + (1,) * after)
    return ops.bind(ops.where_p, mask, value, x)


def _placed_mask(index, ndim):
    """``(axis, mask)`` for an index that is one boolean mask starting at ``axis``: alone
    (axis 0), after full slices (``[:, :, mask]``) or after an Ellipsis (``[..., mask]``
    ends at the last axis); None for any other index."""
    entries = index if isinstance(index, tuple) else (index,)
    if not entries:
        return None  # x[()] = value
    if len(entries) > 1 and getattr(entries[0], "dtype", None) == np.bool_ and all(
            entry is Ellipsis or _full_slice(entry) for entry in entries[1:]):
        # x[mask, :] = v (pmocz's lattice Boltzmann F[cylinder, :] = bndryF): the mask
        # alone, when the full slices after it fit x's dims (else NumPy's IndexError)
        slices = sum(entry is not Ellipsis for entry in entries[1:])
        if sum(entry is Ellipsis for entry in entries[1:]) > 1 or isinstance(
                entries[0], (tuple, list)) or ndim_of(entries[0]) + slices > ndim:
            return None
        return 0, entries[0]
    *leading, mask = entries
    if getattr(mask, "dtype", None) != np.bool_ or isinstance(mask, (tuple, list)):
        return None
    if len(leading) == 1 and leading[0] is Ellipsis:
        before = ndim - ndim_of(mask)
        return (before, mask) if before >= 0 else None
    if all(isinstance(entry, slice) and entry.start is None and entry.stop is None
           and entry.step is None for entry in leading):
        return len(leading), mask
    return None


def _full_slice(entry):
    return (isinstance(entry, slice) and entry.start is None and entry.stop is None
            and entry.step is None)


def _check_converts_as_numpy(value, dtype):
    """Refuse (the call runs eagerly) a run-time Python number that NumPy's assignment
    into an integer array converts through Python's ``int``: ``t[k] = y`` raises
    ``ValueError`` at a NaN ``y`` and ``OverflowError`` past the range, where a cast
    would store a wrapped value. A Python int into int64 is that cast."""
    aval = getattr(value, "aval", None)
    dtype = np.dtype(dtype)
    if aval is None or not aval.weak or dtype.kind not in "iu":
        return
    if aval.dtype.kind in "iu" and dtype == np.dtype(np.int64):
        return
    number = "int" if aval.dtype.kind in "iu" else "float"
    raise UnsupportedError(f"{line_prefix(user_location())}assigning a run-time Python "
                           f"{number} into a {dtype} array (NumPy converts it with int() "
                           "and raises at NaN or past the range; a compiled cast would wrap)")


def keep_numpy_scalar_in_range(value, dtype):
    """A traced NumPy scalar (``x.sum()``, ``u[0]``) assigned by basic indexing into a
    signed integer array (``out[0] = x.max()``) goes through Python's ``int`` in NumPy:
    ``ValueError`` at NaN, ``OverflowError`` at infinity and past the range, where a cast
    would store a wrapped value. Guards keep it in range (the call runs eagerly, and
    raises, past them). A 0-d array, a mask or an index array is cast, as NumPy does."""
    from .traced_array import _is_numpy_scalar  # cycle: traced_array -> here

    aval, dtype = getattr(value, "aval", None), np.dtype(dtype)
    if aval is None or aval.weak or aval.shape or dtype.kind != "i":
        return
    source = np.dtype(aval.dtype)
    if source.kind not in "iuf" or np.can_cast(source, dtype, "safe") or not (
            _is_numpy_scalar(value)):
        return
    info = np.iinfo(dtype)
    if source.kind == "f":
        if bool(np.isnan(value)):
            raise as_numpy_would(ValueError("cannot convert float NaN to integer"))
        if bool(np.isinf(value)):
            raise as_numpy_would(OverflowError("cannot convert float infinity to integer"))
        # int() truncates: in range is (min - 1, max + 1), where min - 1 is a value of the
        # float dtype (else from min on: no float lies between the two)
        below = int(info.min) - 1
        fits = (bool(value > float(below)) if int(np.array(below, source)) == below
                else bool(value >= float(info.min))) and bool(value < float(info.max) + 1.0)
    else:
        if source.itemsize < 8:  # (compiled code computes in int64, not uint8 or uint32)
            value = value.astype(np.int64)
        fits = bool(value >= int(info.min)) and bool(value <= int(info.max))
    if not fits:
        raise as_numpy_would(OverflowError(
            f"Python integer {int(value.value)} out of bounds for {dtype}"))


def add_at(x, index, value):
    """``x`` after ``np.add.at(x, index, value)``, as a new array: unbuffered, so a
    position an index array repeats gets every value added (the scatter's own sum).

    >>> add_at(np.zeros(4), np.array([1, 1, 3]), np.array([1.0, 2.0, 5.0])).tolist()
    [0.0, 3.0, 0.0, 5.0]
    """
    plan = IndexPlan(tuple(shape_of(x)), index)
    value = _broadcast_value(value, plan.result_shape(), x)
    if getattr(value, "dtype", None) != x.dtype:
        value = ops.bind(ops.cast_p, value, dtype=x.dtype)
    return x + _scatter(plan, value, unique=False)


def _ranges_as_arrays(index):
    """``range(N)`` of a dim in an index (``scores[range(N), y]``) as ``arange(N)``."""
    if isinstance(index, SymRange):
        return index.as_array()
    if type(index) is tuple and any(isinstance(entry, SymRange) for entry in index):
        return tuple(entry.as_array() if isinstance(entry, SymRange) else entry
                     for entry in index)
    return index


def _scatter(plan, value, unique=True):
    if plan.advanced:
        value = _scatter_advanced(value, plan, unique)
    value = ops.reshape(value, plan.sliced_shape)
    value = ops.flip(value, plan.flipped)
    config = plan.pad_config()
    if not is_traced(value) and any(isinstance(part, SymInt) for entry in config
                                    for part in entry):
        # alpha[0] = 1.0 into a buffer of a dynamic length: the padding is symbolic, so
        # the constant block is a value of the trace (NumPy's pad would pin the dim)
        context = current_context()
        value = context.tracer_for(context.atom(np.asarray(value))[0])
    return ops.pad(value, config)


def _advanced_layout(shape, advanced):
    """Where the index arrays act: ``(permutation or None, first axis, dims, flat index)``.
    Separated index arrays move their axes to the front first (NumPy's rule); several
    index arrays act as one flat index into their merged axes."""
    positions = [position for position, _, _ in advanced]
    permutation = None
    if positions != list(range(positions[0], positions[0] + len(positions))):
        rest = [axis for axis in range(len(shape)) if axis not in positions]
        permutation = positions + rest
        positions = list(range(len(positions)))
        shape = tuple(shape[axis] for axis in permutation)
    dims = [shape[position] for position in positions]
    indices = [index for _, _, index in advanced]
    if len(indices) == 1:
        index = indices[0]
        return permutation, positions[0], dims, np.asarray(index) if _is_integer(index) else index
    index_shape = broadcast_shapes(*(tuple(shape_of(index)) for index in indices))
    flat, valid = 0, True
    for (_, source_axis, index), dim in zip(advanced, dims):
        index = _wrap_negative(index, dim, source_axis)
        flat = flat * dim + index
        if not _is_integer(index) and not isinstance(index, np.ndarray):
            # traced: checked per axis here, as NumPy does (p[rows, labels] with a label
            # past the last class must not read the next row)
            valid = valid & (index >= 0) & (index < dim)
    if valid is not True:
        # an index past its axis makes the flat index past the merged axes: the gather or
        # scatter kernel's bounds check then fails, and eager raises NumPy's IndexError
        flat = np.where(valid, flat, size_of(dims))
    flat = ops.broadcast_to(np.asarray(flat) if _is_integer(flat) else flat, index_shape)
    return permutation, positions[0], dims, flat


def _merged(shape, first, dims):
    return shape[:first] + (size_of(dims),) + shape[first + len(dims) :]


def _gather_advanced(x, advanced):
    """Integer-array indexing of ``x`` at ``(position, source_axis, index)`` entries."""
    permutation, first, dims, flat = _advanced_layout(tuple(shape_of(x)), advanced)
    if permutation is not None:
        x = ops.transpose(x, permutation)
    x = ops.reshape(x, _merged(tuple(shape_of(x)), first, dims))
    return ops.gather(x, flat, axis=first)


def _scatter_advanced(value, plan, unique=True):
    """The transpose of ``_gather_advanced``: ``value`` placed into ``plan.new_shape``
    (values at a repeated position add up; ``unique`` refuses that, as assignment must)."""
    permutation, first, dims, flat = _advanced_layout(plan.new_shape, plan.advanced)
    if unique:
        _check_unique_positions(flat, size_of(dims))
    shape = plan.new_shape
    if permutation is not None:
        shape = tuple(shape[axis] for axis in permutation)
    if value.dtype == np.bool_:
        placed = ops.scatter_add(
            ops.bind(ops.cast_p, value, dtype=np.int32), flat, first, size_of(dims)
        )
        placed = placed > 0
    else:
        placed = ops.scatter_add(value, flat, first, size_of(dims))
    placed = ops.reshape(placed, shape)
    if permutation is not None:
        placed = ops.transpose(placed, tuple(int(axis) for axis in np.argsort(permutation)))
    return placed


def _check_unique_positions(flat, size):
    """Refuse an assignment through indices that repeat a position (``d[[1, 1]] -= 1``):
    NumPy keeps the last write, a scatter would add them. A traced index is checked by a
    guard, so a later call whose indices repeat leaves the compiled code for NumPy
    (``d[idx] -= 1`` with ``idx = [1, 1, 5]`` after ``[0, 2, 4]`` traced).

    >>> try:
    ...     _check_unique_positions(np.array([0, -1, 2]), 3)  # -1 is position 2
    ... except IndexError as error:
    ...     print(str(error)[:56])
    assignment through an index array that repeats positions
    """
    positions = _concrete_indices(flat).ravel()
    if positions.size < 2:
        return
    wrapped = np.where(positions < 0, positions + int(value_of(size)), positions)
    if np.unique(wrapped).size != wrapped.size:
        raise UnsupportedIndexError(
            "assignment through an index array that repeats positions: NumPy keeps the last "
            "write, which tracejit does not reproduce; use unique indices"
        )
    if isinstance(flat, np.ndarray):
        return  # constant indices: checked once, here
    flat = ops.reshape(flat, (size_of(tuple(shape_of(flat))),))
    ones = ops.full(tuple(shape_of(flat)), 1, np.int32, like=flat)
    hits = ops.scatter_add(ones, flat, 0, size)
    unique = ops.bind(ops.max_p, hits, axes=(0,), keepdims=False) <= 1
    bool(unique)  # a guard when traced: the later call's indices must not repeat either


def _concrete_indices(index):
    """The real values of an index: a tracer's carried value, a Tensor's data."""
    concrete = getattr(index, "value", index)
    if hasattr(concrete, "requires_grad"):  # a tracejit.Tensor
        concrete = concrete.data
    return np.asarray(concrete)


def _wrap_negative(index, dim, axis):
    """One of several index arrays with negatives counted from the end; checked here
    when concrete, since the merged flat index could be in range when this one is not."""
    if _is_integer(index):
        position = int(index) + dim if index < 0 else int(index)
        if not 0 <= position < dim:
            raise _index_error(int(index), axis, dim)
        return position
    if isinstance(index, np.ndarray):
        if index.dtype.kind not in "iu":
            raise IndexError(
                "arrays used as indices must be of integer (or boolean) type, "
                f"not {index.dtype}"
            )
        bad = (index < -dim) | (index >= dim)
        if bad.any():
            raise _index_error(int(index[bad].flat[0]), axis, dim)
        return np.where(index < 0, index + dim, index)
    return np.where(index < 0, index + dim, index)
