"""Boolean-mask reads of traced data: ``x[mask]`` kept as a lazy selection.

The length of ``x[mask]`` depends on the mask's values, so no compiled program can give it
a shape. What model code does with such a selection needs none: it reduces it
(``np.sum(x[x > 0])``, ``np.mean(pred[labels == 1] == 1)``), usually after element-wise
work (``np.log(p[mask])``, ``(y[m] - t[m]) ** 2``). Under tracing, ``x[mask]`` with a
traced boolean ``mask`` over ``x``'s leading dims is a ``MaskedSelection``: ``x`` kept at
its full shape, plus the mask. Element-wise operations apply to the full array and give
selections again; reductions fill the unselected positions with the reduction's identity
(``np.sum(x[mask])`` is ``np.sum(np.where(mask, x, 0))``, the mean divides by
``mask.sum()``), so every shape stays the one NumPy would give without the mask.

Unselected positions hold 1 between operations, so later element-wise work sees harmless
values: no spurious ``log(0)`` warnings while tracing, and no ``0 * inf`` NaN in gradients
(the where-gradient trap). Uses that need the length as a Python int (``len()``,
``.shape``, ``.size``) record a value guard on the count; ``np.max`` of an empty
selection raises NumPy's ``ValueError`` (a guard on ``count > 0`` sends such a call to
eager NumPy). Everything else (indexing the selection, ``np.sort``, returning it,
``tolist()``, ``np.concatenate``) raises a ``TraceError`` naming the user's line, so the
jit function runs eagerly.

>>> from tracejit.tracer.tracing import trace
>>> def positive_mean(x):
...     return np.mean(np.log(x[x > 0]))
>>> t = trace(positive_mean, np.array([1.0, -2.0, np.e, 0.0]))
>>> float(t.outputs)
0.5
"""

from __future__ import annotations

import operator

import numpy as np

from . import numpy_api, ops
from .errors import TraceError, as_numpy_would
from .ir import Var
from .locations import called_by_user, line_prefix, user_location
from .shapes import normalize_axes, size_of
from .tracing import Tracer

SUPPORTED = (
    "np.sum/np.prod/np.mean/np.var/np.std/np.max/np.min/np.any/np.all/np.count_nonzero "
    "(and the methods of the same names), element-wise ufuncs, operators, np.where, "
    "np.clip and astype with scalars, 0-d values or selections of the same mask (the "
    "selection first: x[mask] * w), and len()/.shape/.size (a value guard on the count)"
)


def select(x, index):
    """``x[index]`` as a ``MaskedSelection`` when ``index`` is a traced boolean mask over
    ``x``'s leading dims (``x[mask]``, ``x[mask, ...]``, ``x[mask, :]``); ``None`` for any
    other index, which ``indexing.getitem`` handles (or refuses) as before."""
    entries = index if isinstance(index, tuple) else (index,)
    if not entries or not isinstance(x, Tracer):
        return None
    mask, trailing = entries[0], entries[1:]
    if not isinstance(mask, Tracer) or mask.dtype != np.bool_ or not mask.shape:
        return None  # a 0-d mask adds an axis (x[True]): the general path refuses it
    if not all(entry is Ellipsis or (isinstance(entry, slice) and entry == slice(None))
               for entry in trailing) or sum(entry is Ellipsis for entry in trailing) > 1:
        return None
    context = mask.context
    if context.outside_array(mask) is not None:
        return None  # an outside mask: its contents are guarded and it indexes as usual
    shape, mask_shape = tuple(x.shape), tuple(mask.shape)
    slices = sum(entry is not Ellipsis for entry in trailing)
    if len(mask_shape) + slices > len(shape) or any(
        not (dim is other or dim == other) for dim, other in zip(mask_shape, shape)
    ):
        return None  # NumPy's IndexError, raised by the general path
    # The mask as it is now: a later in-place write to it must not change this selection.
    mask = Tracer(context, mask.ir_var, mask.value, mask_shape)
    info = _Mask(mask, user_location())
    return MaskedSelection(_keep_selected(x, info), info)


class _Mask:
    """The mask a selection was made with, and where (for messages)."""

    __slots__ = ("mask", "location")

    def __init__(self, mask, location):
        self.mask, self.location = mask, location

    @property
    def ndim(self):
        return len(self.mask.shape)

    def same_as(self, other):
        """Whether both masks hold the same values: one traced array, or the same
        element-wise operation on the same operands (``y[x > 0] * w[x > 0]``)."""
        mine, theirs = self.mask.ir_var, other.mask.ir_var
        if mine is theirs:
            return True
        first = _defining_eqn(self.mask.context, mine)
        second = _defining_eqn(other.mask.context, theirs)
        return (first is not None and second is not None and first.prim is second.prim
                and first.prim.kind == "pointwise" and first.params == second.params
                and len(first.inputs) == len(second.inputs)
                and all(_same_atom(a, b) for a, b in zip(first.inputs, second.inputs)))

    def over(self, ndim):
        """The mask shaped to broadcast against a dense array of ``ndim`` dims."""
        if ndim == self.ndim:
            return self.mask
        return ops.reshape(self.mask, tuple(self.mask.shape) + (1,) * (ndim - self.ndim))

    def count(self):
        """How many positions are selected: a traced 0-d int64."""
        return numpy_api.sum(self.mask)

    def length(self):
        """The count as a Python int, for ``len()`` and ``.shape``: a value guard."""
        return int(self.count())


def _defining_eqn(context, var):
    for record in reversed(context.body):
        if getattr(record, "out", None) is var:
            return record
    return None


def _same_atom(first, second):
    if isinstance(first, Var) or isinstance(second, Var):
        return first is second
    return type(first) is type(second) and first == second


def _scalar(value, dtype):
    return np.full((), value, dtype)[()]


def _keep_selected(dense, info):
    """``dense`` with 1 at the unselected positions (see the module docstring)."""
    return ops.bind(ops.where_p, info.over(len(dense.shape)), dense, _scalar(1, dense.dtype))


def _identity_filled(selection, fill, dtype=None):
    """The selection's dense values with ``fill`` at the unselected positions."""
    values = selection._values
    if dtype is not None:
        values = numpy_api.astype(values, dtype)
    return ops.bind(ops.where_p, selection._info.over(len(values.shape)), values,
                    _scalar(fill, values.dtype))


class MaskedSelection:
    """``x[mask]`` for a traced boolean ``mask``: the dense values (``mask.shape +
    rest``, 1 where unselected) and the mask. NumPy's shape would be ``(count, *rest)``.

    ``__tracejit_priority__ = 1``: where a trace collects its outputs it treats a selection
    as an array and converts it with ``__array__``, which refuses; returning a selection
    is thereby an error instead of a frozen Python object. A traced array on the left of
    an operator (``w * x[mask]``) takes the call first and meets the same refusal."""

    __slots__ = ("_values", "_info")
    __tracejit_priority__ = 1
    __array_priority__ = 1000

    def __hash__(self):  # {x[x > 0]: 1} in the user's code, as Tracer.__hash__
        if called_by_user():
            if getattr(getattr(self._values, "context", None), "tensor_arguments", True):
                raise TraceError(f"{line_prefix(user_location())}a traced selection used as "
                                 "a dict key or set member (hashed) is not supported; the "
                                 "call runs eagerly")
            raise as_numpy_would(TypeError("unhashable type: 'numpy.ndarray'"))
        return object.__hash__(self)

    def __init__(self, values, info):
        self._values, self._info = values, info

    def dense_for(self, selection):
        """The dense values (1 where unselected) when this selection was made with
        ``selection``'s mask, else ``None``: ``np.piecewise`` writes them where the mask
        holds (``choices.piecewise``)."""
        return self._values if self._info is selection._info else None

    # --- what NumPy would say about the array --------------------------------------------
    @property
    def dtype(self):
        return self._values.dtype

    @property
    def ndim(self):
        return 1 + len(self._rest)

    @property
    def _rest(self):
        return tuple(self._values.shape)[self._info.ndim:]

    @property
    def shape(self):
        return (self._info.length(), *self._rest)

    @property
    def size(self):
        return self._info.length() * size_of(self._rest)

    def __len__(self):
        return self._info.length()

    @property
    def T(self):  # noqa: N802 - NumPy's name
        if self._rest:
            raise self._refusal(".T")
        return self

    def ravel(self, order="C"):
        if self._rest:
            raise self._refusal(".ravel()")
        return self

    flatten = ravel

    def copy(self, order="C"):
        return MaskedSelection(self._values, self._info)

    def astype(self, dtype, copy=True, **_):
        return self._apply(lambda values: numpy_api.astype(values, dtype), self)

    def __repr__(self):
        where = self._info.location
        made = f" made at {where.file}:{where.line}" if where else ""
        return f"<MaskedSelection of dtype {self.dtype}, rest {self._rest}{made}>"

    # --- element-wise: the dense values, then a selection again --------------------------
    def _operand(self, value):
        """``value`` as an operand of the dense computation, or a refusal: selections of
        the same mask, 0-d values, and arrays that broadcast against the trailing dims."""
        if isinstance(value, MaskedSelection):
            if not value._info.same_as(self._info) or len(value._rest) != len(self._rest):
                raise self._refusal("combining selections made with different masks (or of "
                                    "different ranks), whose elements need not line up,")
            return value._values
        if isinstance(value, type):
            return value  # a dtype argument (np.float32)
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            ndim = len(value.shape)
        elif isinstance(value, (list, tuple)):
            ndim = np.ndim(value)
        else:
            return value
        if ndim > len(self._rest):
            raise self._refusal(f"combining the selection with an array of {ndim} dims")
        return value

    def _apply(self, function, *operands, **keywords):
        dense = [self._operand(value) for value in operands]
        keywords = {key: self._operand(value) for key, value in keywords.items()}
        result = function(*dense, **keywords)
        if isinstance(result, tuple):
            return tuple(self._derived(item) for item in result)
        return self._derived(result)

    def _derived(self, dense):
        if not isinstance(dense, Tracer) or len(dense.shape) < self._info.ndim:
            raise self._refusal("this operation")
        return MaskedSelection(_keep_selected(dense, self._info), self._info)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "reduce" and ufunc in _UFUNC_REDUCTIONS:
            kwargs = {key: value for key, value in kwargs.items()
                      if value is not None or key == "axis"}
            kwargs.setdefault("axis", 0)  # ufunc.reduce reduces axis 0 by default
            if kwargs.pop("out", None) is not None:
                raise self._refusal(f"np.{ufunc.__name__}.reduce(..., out=...)")
            return _UFUNC_REDUCTIONS[ufunc](*inputs, **kwargs)
        out = kwargs.get("out")
        if method != "__call__" or (out is not None and any(item is not None for item in out)):
            raise self._refusal(f"np.{ufunc.__name__}.{method}" if method != "__call__"
                                else f"np.{ufunc.__name__}(..., out=...)")
        kwargs.pop("out", None)
        return self._apply(ufunc, *inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        implementation = FUNCTIONS.get(func)
        if implementation is None:
            raise self._refusal(f"np.{getattr(func, '__name__', func)}")
        return implementation(*args, **kwargs)

    @staticmethod
    def __tracejit_bind__(prim, args, params):
        # Reached when a primitive meets a selection and no traced array (a tracer would
        # take the call, and refuse the selection through __array__).
        selection = next(arg for arg in args if isinstance(arg, MaskedSelection))
        if prim.kind != "pointwise":
            raise selection._refusal(f"the operation {prim.name}")
        return selection._apply(lambda *dense: ops.bind(prim, *dense, **params), *args)

    def __neg__(self):
        return self._apply(operator.neg, self)

    def __pos__(self):
        return self._apply(np.positive, self)

    def __abs__(self):
        return self._apply(np.absolute, self)

    def __invert__(self):
        return self._apply(operator.invert, self)

    def _inplace(self, function, other):
        """``s += v`` rebinds ``s`` to a new selection, with NumPy's in-place rules: the
        result must keep the shape and cast "same_kind" to the dtype."""
        result = function(self, other)
        if len(result._rest) != len(self._rest) or any(
            not (dim is old or dim == old) for dim, old in zip(result._rest, self._rest)
        ):
            raise as_numpy_would(ValueError("non-broadcastable output operand"))
        if result.dtype != self.dtype:
            if not np.can_cast(result.dtype, self.dtype, "same_kind"):
                raise as_numpy_would(TypeError(
                    f"Cannot cast ufunc output from dtype('{result.dtype}') to "
                    f"dtype('{self.dtype}') with casting rule 'same_kind'"))
            result = result.astype(self.dtype)
        return result

    # --- reductions --------------------------------------------------------------------
    # Keywords these do not take (``where=``, ``initial=`` of sum) reach the functions,
    # which refuse them: the call runs eagerly, where Python's TypeError would have
    # failed it.
    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **more):  # noqa: A003
        return sum_(self, axis, dtype, out, keepdims, **more)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, **more):
        return prod(self, axis, dtype, out, keepdims, **more)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **more):
        return mean(self, axis, dtype, out, keepdims, **more)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **more):
        return var(self, axis, dtype, out, ddof, keepdims, **more)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **more):
        return std(self, axis, dtype, out, ddof, keepdims, **more)

    def max(self, axis=None, out=None, keepdims=False, **more):  # noqa: A003
        return max_(self, axis, out, keepdims, **more)

    def min(self, axis=None, out=None, keepdims=False, **more):  # noqa: A003
        return min_(self, axis, out, keepdims, **more)

    def any(self, axis=None, out=None, keepdims=False, **more):  # noqa: A003
        return any_(self, axis, out, keepdims, **more)

    def all(self, axis=None, out=None, keepdims=False, **more):  # noqa: A003
        return all_(self, axis, out, keepdims, **more)

    def clip(self, min=None, max=None, out=None, **kwargs):  # noqa: A002 - NumPy's names
        return clip(self, min, max, out, **kwargs)

    # --- everything that needs the elements or the length as data: refused --------------
    def _refusal(self, use, at_use=True):
        """The TraceError for ``use``: where it happened (the user's line; where the
        selection was made when the use is tracejit's, such as collecting outputs), why it
        cannot be compiled and what can."""
        here, made = user_location(), self._info.location
        first = (here or made) if at_use else (made or here)
        prefix = line_prefix(first)
        origin = ""
        if at_use and made and (here is None or (made.file, made.line) != (here.file,
                                                                              here.line)):
            origin = f" (made at {made.file}:{made.line}: {made.source})"
        source = f"\n    {first.source}" if first and first.source else ""
        return TraceError(
            f"{prefix}{use} on x[mask]{origin}, a boolean-mask selection whose mask comes "
            "from traced data: its length depends on the data, so it has no shape to "
            f"compile. Supported on such a selection: {SUPPORTED}; anything else runs "
            f"eagerly (or use np.where(mask, x, fill) yourself){source}")

    def __array__(self, dtype=None, copy=None):
        raise self._refusal("using it as an array (returning it, or passing it where its "
                            "elements are needed)", at_use=False)

    def __iter__(self):
        raise self._refusal("iterating over it (list(), sum(), a for loop)")

    def __getitem__(self, index):
        """``x[mask][:, idx]``: an index over the trailing dims only (the selected rows
        kept whole, as pmocz's lattice Boltzmann code reorders the directions of its
        boundary cells, ``F[cylinder, :][:, [0, 5, 6, 7, 8, 1, 2, 3, 4]]``) is the same
        index of the dense values; any index of the selected axis itself is refused."""
        trailing = _trailing_index(index, len(self._rest))
        if trailing is None:
            raise self._refusal("indexing it")
        dense = self._values[(slice(None),) * self._info.ndim + trailing]
        return self._derived(dense)

    def __setitem__(self, index, value):
        raise self._refusal("assigning into it")

    def __bool__(self):
        raise self._refusal("its truth value")

    def __int__(self):
        raise self._refusal("int()")

    def __float__(self):
        raise self._refusal("float()")

    def __index__(self):
        raise self._refusal("using it as an index")

    def __format__(self, spec):
        raise self._refusal("formatting it")

    __str__ = __format__

    def __matmul__(self, other):
        raise self._refusal("@ (matmul)")

    __rmatmul__ = __matmul__

    def __getattr__(self, name):
        # Array methods and properties not defined above (argsort, reshape, tolist, ...).
        if not name.startswith("_") and hasattr(np.ndarray, name):
            raise self._refusal(f".{name}")
        raise AttributeError(f"'MaskedSelection' object has no attribute {name!r}")


def _trailing_index(index, rest_ndim):
    """The entries of ``index`` after a leading ``:`` or ``...`` when they index only the
    trailing dims of a selection with ``rest_ndim`` of them: slices, and at most one integer
    or integer index (with two, NumPy would move their broadcast axes to the front when a
    slice separates them). None for anything else."""
    if not isinstance(index, tuple) or not index:
        return None
    first, trailing = index[0], index[1:]
    if not (first is Ellipsis or (isinstance(first, slice) and first == slice(None))):
        return None
    if len(trailing) > rest_ndim or (first is not Ellipsis and not trailing):
        return None
    others = [entry for entry in trailing if not isinstance(entry, slice)]
    if len(others) > 1 or not all(_integer_index(entry) for entry in others):
        return None
    return tuple(trailing)


def _integer_index(entry):
    """Whether ``entry`` is an integer or an array or list of integers (not a bool)."""
    if entry is None or entry is Ellipsis or isinstance(entry, (bool, MaskedSelection)):
        return False
    dtype = getattr(entry, "dtype", None)
    if dtype is None:
        try:
            dtype = np.asarray(entry).dtype
        except (TypeError, ValueError):
            return False
    return np.dtype(dtype).kind in "iu"


def _binary(function):
    def forward(self, other):
        return self._apply(function, self, other)

    def reflected(self, other):
        return self._apply(function, other, self)

    def inplace(self, other):
        return self._inplace(function, other)

    return forward, reflected, inplace


for _name, _function in [
    ("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
    ("truediv", operator.truediv), ("floordiv", operator.floordiv), ("mod", operator.mod),
    ("pow", operator.pow), ("and", operator.and_), ("or", operator.or_),
    ("xor", operator.xor),
]:
    _forward, _reflected, _in_place = _binary(_function)
    setattr(MaskedSelection, f"__{_name}__", _forward)
    setattr(MaskedSelection, f"__r{_name}__", _reflected)
    setattr(MaskedSelection, f"__i{_name}__", _in_place)
for _name, _function in [
    ("lt", operator.lt), ("le", operator.le), ("gt", operator.gt), ("ge", operator.ge),
    ("eq", operator.eq), ("ne", operator.ne),
]:
    setattr(MaskedSelection, f"__{_name}__", _binary(_function)[0])


# --- reductions over a selection -------------------------------------------------------------
def _refuse_out(selection, name, out, extra=None):
    if out is not None:
        raise selection._refusal(f"{name}(..., out=...)")
    if extra:
        raise selection._refusal(f"{name}(..., {', '.join(sorted(extra))}=...)")


def _reduced_axes(selection, axis):
    """``(over_selection, dense_axes)``: whether ``axis`` includes the selection's axis 0
    (the mask's dims, all of them), and the dense array's axes it reduces."""
    axes = normalize_axes(axis, selection.ndim)
    masked = selection._info.ndim
    dense = tuple(range(masked)) if 0 in axes else ()
    return 0 in axes, dense + tuple(masked - 1 + other for other in axes if other > 0)


def _finish(selection, reduced, over_selection, keepdims):
    """A dense reduction over ``_reduced_axes`` (with ``keepdims``) shaped as NumPy shapes
    the selection's: a plain array when axis 0 was reduced (its mask dims merged into one
    with ``keepdims``), else a selection again."""
    if not over_selection:
        return selection._derived(reduced)
    masked = selection._info.ndim
    if keepdims and masked > 1:
        return ops.reshape(reduced, tuple(reduced.shape)[masked - 1:])
    return reduced


def _reduce(selection, function, fill, axis, keepdims, dtype=None):
    over, dense_axes = _reduced_axes(selection, axis)
    filled = _identity_filled(selection, fill, dtype)
    reduced = function(filled, axis=dense_axes, keepdims=keepdims)
    return _finish(selection, reduced, over, keepdims)


def _counted(selection, over, dense_axes):
    """How many elements each result of a reduction over ``dense_axes`` saw: the count
    times the reduced trailing dims (a traced int64 when axis 0 is reduced)."""
    masked = selection._info.ndim
    trailing = size_of(selection._values.shape[axis] for axis in dense_axes if axis >= masked)
    if not over:
        return trailing
    count = selection._info.count()
    return count if isinstance(trailing, int) and trailing == 1 else count * trailing


def sum_(a, axis=None, dtype=None, out=None, keepdims=False, **unsupported):
    _refuse_out(a, "np.sum", out, unsupported)
    return _reduce(a, numpy_api.sum, 0, axis, keepdims, dtype)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, **unsupported):
    _refuse_out(a, "np.prod", out, unsupported)
    return _reduce(a, numpy_api.prod, 1, axis, keepdims, dtype)


def any_(a, axis=None, out=None, keepdims=False, **unsupported):
    _refuse_out(a, "np.any", out, unsupported)
    return _reduce(a, numpy_api.any, 0, axis, keepdims)


def all_(a, axis=None, out=None, keepdims=False, **unsupported):
    _refuse_out(a, "np.all", out, unsupported)
    return _reduce(a, numpy_api.all, 1, axis, keepdims)


def count_nonzero(a, axis=None, *, keepdims=False):
    """np.count_nonzero: an int64 (NumPy 2 returns ``np.int64`` for ``axis=None`` too)."""
    return sum_(a != 0, axis=axis, keepdims=keepdims)


def _mean_dtype(a, dtype):
    if dtype is not None:
        return np.dtype(dtype)
    return a.dtype if np.dtype(a.dtype).kind in "fc" else np.dtype(np.float64)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, **unsupported):
    """The sum over the count: NaN for an empty selection, as NumPy gives (NumPy also
    warns "Mean of empty slice"; compiled code does not)."""
    _refuse_out(a, "np.mean", out, unsupported)
    dtype = _mean_dtype(a, dtype)
    over, dense_axes = _reduced_axes(a, axis)
    if not over:
        return a._apply(lambda values: numpy_api.mean(values, axis=dense_axes, dtype=dtype,
                                                      keepdims=keepdims), a)
    total = numpy_api.sum(_identity_filled(a, 0, dtype), axis=dense_axes, keepdims=keepdims)
    count = numpy_api.astype(_counted(a, over, dense_axes), dtype)
    return _finish(a, total / count, over, keepdims)


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **unsupported):
    _refuse_out(a, "np.var", out, unsupported)
    dtype = _mean_dtype(a, dtype)
    over, dense_axes = _reduced_axes(a, axis)
    if not over:
        return a._apply(lambda values: numpy_api.var(values, axis=dense_axes, dtype=dtype,
                                                     ddof=ddof, keepdims=keepdims), a)
    values = _identity_filled(a, 0, dtype)
    count = numpy_api.astype(_counted(a, over, dense_axes), dtype)
    centered = values - numpy_api.sum(values, axis=dense_axes, keepdims=True) / count
    centered = ops.bind(ops.where_p, a._info.over(len(values.shape)), centered,
                        _scalar(0, dtype))
    squares = numpy_api.sum(centered * centered, axis=dense_axes, keepdims=keepdims)
    # NumPy divides by max(n - ddof, 0): NaN or inf for too few elements, never negative.
    divisor = np.maximum(count - _scalar(ddof, dtype), _scalar(0, dtype))
    return _finish(a, squares / divisor, over, keepdims)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **unsupported):
    _refuse_out(a, "np.std", out, unsupported)
    return np.sqrt(var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims))


def _extreme(a, name, axis, keepdims, largest, initial=np._NoValue):
    """np.max / np.min: NumPy raises for an empty reduction, so the count is guarded
    nonzero (an empty selection later leaves the compiled code for eager NumPy, which
    raises) and an empty one raises NumPy's own error here. With ``initial`` (``np.max(
    d[mask], initial=0)``, the guard against an empty selection) none is raised: the
    extreme of the values and ``initial``, cast to the dtype as NumPy's reduction casts it."""
    over, dense_axes = _reduced_axes(a, axis)
    if initial is not np._NoValue:
        if not isinstance(initial, (bool, int, float, np.generic)):
            raise a._refusal(f"np.{name}(..., initial=) of a {type(initial).__name__}")
        try:  # NumPy's conversion of it (or its error: -1 for a uint8 array)
            with np.errstate(all="ignore"):
                start = getattr(np, name)(np.empty(0, a.dtype), initial=initial)
        except (TypeError, ValueError, OverflowError) as error:
            raise as_numpy_would(error) from None
        result = _filled_extreme(a, axis, keepdims, largest)
        return (np.maximum if largest else np.minimum)(result, start)
    if over:
        rest = tuple(dim if isinstance(dim, int) else 2 for dim in a._rest)
        try:  # NumPy's verdict on an empty selection of this shape, with its message
            getattr(np, name)(np.empty((0,) + rest, a.dtype), axis=axis)
            empty_error = None
        except ValueError as error:
            empty_error = error
        if empty_error is not None and (
            size_of(_rest_sizes(a, dense_axes)) == 0 or not bool(a._info.count() > 0)
        ):
            raise as_numpy_would(empty_error)
    return _filled_extreme(a, axis, keepdims, largest)


def _filled_extreme(a, axis, keepdims, largest):
    """The extreme with the unselected positions filled by the reduction's identity (an
    empty selection gives that identity)."""
    dtype = np.dtype(a.dtype)
    if dtype.kind == "f":
        fill = -np.inf if largest else np.inf
    elif dtype.kind == "b":
        fill = not largest
    else:
        info = np.iinfo(dtype)
        fill = info.min if largest else info.max
    function = numpy_api.max if largest else numpy_api.min
    return _reduce(a, function, fill, axis, keepdims)


def _rest_sizes(a, dense_axes):
    """The static sizes of the trailing dims a reduction covers (symbolic dims are >= 2)."""
    masked = a._info.ndim
    return [dim if isinstance(dim, int) else 2 for axis, dim in
            enumerate(a._values.shape) if axis >= masked and axis in dense_axes]


def max_(a, axis=None, out=None, keepdims=False, initial=np._NoValue, **unsupported):
    _refuse_out(a, "np.max", out, unsupported)
    return _extreme(a, "max", axis, keepdims, True, initial)


def min_(a, axis=None, out=None, keepdims=False, initial=np._NoValue, **unsupported):
    _refuse_out(a, "np.min", out, unsupported)
    return _extreme(a, "min", axis, keepdims, False, initial)


# --- element-wise functions ----------------------------------------------------------------
def _selection_in(*values):
    return next(value for value in values if isinstance(value, MaskedSelection))


def where(condition, x=None, y=None):
    selection = _selection_in(condition, x, y)
    if x is None or y is None:
        raise selection._refusal("np.where(mask) (the positions)")
    return selection._apply(np.where, condition, x, y)


def clip(a, a_min=None, a_max=None, out=None, **bounds):
    selection = _selection_in(a, a_min, a_max, *bounds.values())
    _refuse_out(selection, "np.clip", out)
    return selection._apply(np.clip, a, a_min, a_max, **bounds)


def astype(x, dtype, /, *, copy=True, device=None):
    return x.astype(dtype)


def size(a, axis=None):
    return a.size if axis is None else a.shape[axis]


def shape(a):
    return a.shape


def ndim(a):
    return a.ndim


# What a selection answers in NumPy's functions (``__array_function__``); the ufuncs all
# work element-wise through ``__array_ufunc__``. docs/numpy_api.md lists these.
FUNCTIONS = {
    np.sum: sum_,
    np.prod: prod,
    np.mean: mean,
    np.var: var,
    np.std: std,
    np.max: max_,
    np.amax: max_,
    np.min: min_,
    np.amin: min_,
    np.any: any_,
    np.all: all_,
    np.count_nonzero: count_nonzero,
    np.where: where,
    np.clip: clip,
    np.astype: astype,
    np.size: size,
    np.shape: shape,
    np.ndim: ndim,
}

_UFUNC_REDUCTIONS = {
    np.add: sum_,
    np.multiply: prod,
    np.maximum: max_,
    np.minimum: min_,
    np.logical_and: all_,
    np.logical_or: any_,
}


# --- writes through the same mask ------------------------------------------------------------
def assign_selection(x, mask, selection):
    """``x`` after ``x[mask] = selection`` when ``selection`` was made with the same mask
    (cs231n's max-pool backward ``dx[mask] = dout[mask]``; ``x[x < 0] *= 0.5``, whose
    value is ``x[mask] * 0.5``): ``where(mask, values, x)``, the values cast to ``x``'s
    dtype as NumPy's assignment casts them. None for any other mask or shape (the general
    path then refuses the data-dependent count, or raises NumPy's error).

    >>> from tracejit.tracer.tracing import trace
    >>> def halve_negatives(x):
    ...     x = x.copy()
    ...     x[x < 0] *= 0.5
    ...     return x
    >>> trace(halve_negatives, np.array([-2.0, 3.0, -1.0])).outputs.tolist()
    [-1.0, 3.0, -0.5]
    """
    if not isinstance(mask, Tracer) or not selection._info.same_as(_Mask(mask, None)):
        return None
    shape, mask_ndim = tuple(x.shape), selection._info.ndim
    if len(shape) < mask_ndim or any(
        not (dim is other or dim == other) for dim, other in zip(mask.shape, shape)
    ):
        return None
    rest = shape[mask_ndim:]
    # NumPy broadcasts (count, *value_rest) to (count, *rest): with equal ranks, a dim of
    # 1 or the same dim; a shorter value_rest would line count up with a trailing dim.
    if len(selection._rest) != len(rest) or any(
        not (dim is other or dim == other or dim == 1)
        for dim, other in zip(selection._rest, rest)
    ):
        return None
    values = selection._values
    if values.dtype != x.dtype:
        values = ops.bind(ops.cast_p, values, dtype=x.dtype)
    return ops.bind(ops.where_p, selection._info.over(len(shape)), values, x)
