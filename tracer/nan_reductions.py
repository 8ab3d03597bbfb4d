"""NumPy's NaN-ignoring functions (``np.nanmax``, ``np.nanargmax``, ``np.nanmean``, ...)
composed from the NumPy layer, step for step as ``numpy/lib/_nanfunctions_impl.py`` writes
them: replace the NaNs with the reduction's neutral value, reduce, then patch the slices
that held nothing but NaN. Integer and boolean arrays hold no NaN and go straight to the
plain function (``nanmean`` of ints is ``mean``: float64).

The calls go through ``np.*`` on traced or eager arrays, so each step is the NumPy layer's
own composition: gradients come from ``where`` (zero at the NaN positions) and the
reductions' rules, and the whole thing compiles. NumPy raises for an all-NaN slice in
``nanargmax``/``nanargmin``; here that is a value guard (``bool`` of "some slice is all
NaN"), so a call where it happens leaves compiled code and its eager run raises as NumPy.

>>> x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
>>> nanmax(x, axis=1).tolist(), nansum(x, axis=1).tolist()
([3.0, nan], [4.0, 0.0])
>>> int(nanargmin(x[0]))
0
"""

from __future__ import annotations

import numpy as np

from .errors import UnsupportedError, as_numpy_would
from .ops import dtype_of, reshape, shape_of
from .reduction_functions import no_out

_NO_VALUE = np._NoValue  # NumPy's "not given", so a caller's keepdims=False still counts


def real_value(value):
    """The value an eager or traced array holds in this call, for NumPy to raise its own
    error on (``Tracer.value``, ``Tensor.data``, a dim's ``value``): never for results."""
    if isinstance(value, (tuple, list)):
        return type(value)(real_value(item) for item in value)
    if isinstance(value, (np.ndarray, np.generic, int, float)):
        return value
    for attribute in ("value", "data"):  # a Tracer or SymInt; a Tensor
        held = getattr(value, attribute, None)
        if held is not None:
            return held
    return value


def raise_as_numpy(function, *args, **kwargs):
    """Raise the error NumPy's ``function`` raises on the real values of ``args`` (the
    caller knows the call fails), marked as the user's error so jit runs the call eagerly
    and NumPy raises it there again. Returns if NumPy does not raise."""
    try:
        function(*[real_value(arg) for arg in args], **kwargs)
    except (ValueError, TypeError) as error:
        raise as_numpy_would(error) from None


def numpy_scalar(result):
    """A 0-d result as NumPy's functions return it, a scalar: ``result[()]``, NumPy's own
    idiom, which a traced 0-d array keeps (so jit returns ``np.float64``, not a 0-d array,
    where ``np.where`` made one)."""
    return result[()] if getattr(result, "ndim", None) == 0 else result


def _refuse(name, **options):
    given = sorted(option for option, value in options.items() if value is not _NO_VALUE)
    if given:
        raise UnsupportedError(f"np.{name}({', '.join(given)}=...) is not supported on "
                               "tracejit arrays")


def _keepdims(keepdims):
    return False if keepdims is _NO_VALUE else bool(keepdims)


def _replace_nan(a, fill):
    """``a`` with its NaNs replaced by ``fill``, and where the NaNs were (``None`` for
    dtypes that hold no NaN), as each of NumPy's nanfunctions begins."""
    dtype = dtype_of(a)
    if dtype.kind not in "fc":
        return a, None
    mask = np.isnan(a)
    return np.where(mask, np.asarray(fill, dtype), a), mask


def _empty_as_numpy(function, a, **kwargs):
    """An empty ``a`` goes to NumPy's own function on zeros of its shape, which raises
    where NumPy raises (a reduction with no identity over an empty slice); if it does
    not, the composition handles the empty result. A symbolic dim is never 0 (buckets
    start at 2), so this is no guard."""
    if any(isinstance(dim, int) and dim == 0 for dim in shape_of(a)):
        raise_as_numpy(function, np.zeros(np.shape(real_value(a)), dtype_of(a)), **kwargs)


def _divide_by_count(total, count):
    """``total / count`` in ``total``'s dtype, as NumPy's ``_divide_by_count`` divides in
    place (float32 totals over an int count stay float32); 0 / 0 is NumPy's silent NaN."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (total / count).astype(dtype_of(total))


def _inexact(dtype):
    if dtype is not None and np.dtype(dtype).kind not in "fc":
        raise as_numpy_would(TypeError("If a is inexact, then dtype must be inexact"))
    return dtype


# --- extrema and their positions -----------------------------------------------------------
def nanmax(a, axis=None, out=None, keepdims=_NO_VALUE, initial=_NO_VALUE, where=_NO_VALUE):
    return _nan_extremum("nanmax", np.max, -np.inf, a, axis, out, keepdims, initial, where)


def nanmin(a, axis=None, out=None, keepdims=_NO_VALUE, initial=_NO_VALUE, where=_NO_VALUE):
    return _nan_extremum("nanmin", np.min, np.inf, a, axis, out, keepdims, initial, where)


def _nan_extremum(name, reduce, fill, a, axis, out, keepdims, initial, where):
    no_out(name, out)
    _refuse(name, initial=initial, where=where)
    keepdims = _keepdims(keepdims)
    _empty_as_numpy(getattr(np, name), a, axis=axis, keepdims=keepdims)
    replaced, mask = _replace_nan(a, fill)
    result = reduce(replaced, axis=axis, keepdims=keepdims)
    if mask is None:
        return result
    # NumPy warns and gives NaN for a slice of NaNs only (the fill value would win).
    return numpy_scalar(np.where(np.all(mask, axis=axis, keepdims=keepdims), np.nan, result))


def nanargmax(a, axis=None, out=None, *, keepdims=_NO_VALUE):
    return _nan_arg_extremum("nanargmax", np.argmax, -np.inf, a, axis, out, keepdims)


def nanargmin(a, axis=None, out=None, *, keepdims=_NO_VALUE):
    return _nan_arg_extremum("nanargmin", np.argmin, np.inf, a, axis, out, keepdims)


def _nan_arg_extremum(name, arg_reduce, fill, a, axis, out, keepdims):
    no_out(name, out)
    keepdims = _keepdims(keepdims)
    _empty_as_numpy(getattr(np, name), a, axis=axis, keepdims=keepdims)
    replaced, mask = _replace_nan(a, fill)
    # A value guard: calls with an all-NaN slice leave compiled code, and NumPy raises.
    if mask is not None and bool(np.any(np.all(mask, axis=axis))):
        raise as_numpy_would(ValueError("All-NaN slice encountered"))
    return arg_reduce(replaced, axis=axis, keepdims=keepdims)


# --- sums, products, means ---------------------------------------------------------------------
def nansum(a, axis=None, dtype=None, out=None, keepdims=_NO_VALUE, initial=_NO_VALUE,
           where=_NO_VALUE):
    no_out("nansum", out)
    _refuse("nansum", initial=initial, where=where)
    replaced, _ = _replace_nan(a, 0)
    return np.sum(replaced, axis=axis, dtype=dtype, keepdims=_keepdims(keepdims))


def nanprod(a, axis=None, dtype=None, out=None, keepdims=_NO_VALUE, initial=_NO_VALUE,
            where=_NO_VALUE):
    no_out("nanprod", out)
    _refuse("nanprod", initial=initial, where=where)
    replaced, _ = _replace_nan(a, 1)
    return np.prod(replaced, axis=axis, dtype=dtype, keepdims=_keepdims(keepdims))


def nancumsum(a, axis=None, dtype=None, out=None):
    no_out("nancumsum", out)
    replaced, mask = _replace_nan(a, 0)
    if mask is None or (dtype is not None and np.dtype(dtype).kind not in "fc"):
        return np.cumsum(replaced, axis=axis, dtype=dtype)
    return _cumsum_with_infinities(replaced, axis, dtype)


def _cumsum_with_infinities(x, axis, dtype):
    """``np.cumsum`` of floats that may hold ±inf (no NaN). The float cumsum is a matmul
    with a triangle of ones, where ``inf * 0`` would turn every running sum NaN; so the
    finite values go through it and the infinities are counted (an exact integer cumsum):
    a prefix with both signs is NaN, with one sign that infinity, as NumPy's running sum."""
    finite = np.cumsum(np.where(np.isfinite(x), x, 0), axis=axis, dtype=dtype)
    positive = np.cumsum(x == np.inf, axis=axis) > 0
    negative = np.cumsum(x == -np.inf, axis=axis) > 0
    inf, nan = (np.asarray(value, dtype_of(finite)) for value in (np.inf, np.nan))
    infinite = np.where(positive, inf, -inf)
    return np.where(positive & negative, nan, np.where(positive | negative, infinite, finite))


def nanmean(a, axis=None, dtype=None, out=None, keepdims=_NO_VALUE, *, where=_NO_VALUE):
    no_out("nanmean", out)
    _refuse("nanmean", where=where)
    keepdims = _keepdims(keepdims)
    replaced, mask = _replace_nan(a, 0)
    if mask is None:
        return np.mean(replaced, axis=axis, dtype=dtype, keepdims=keepdims)
    dtype = _inexact(dtype)
    count = np.sum(~mask, axis=axis, dtype=np.intp, keepdims=keepdims)
    total = np.sum(replaced, axis=axis, dtype=dtype, keepdims=keepdims)
    return _divide_by_count(total, count)  # 0 / 0: NaN for an all-NaN slice, as NumPy


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO_VALUE, *,
           where=_NO_VALUE, mean=_NO_VALUE, correction=_NO_VALUE):
    no_out("nanvar", out)
    _refuse("nanvar", where=where, mean=mean)
    if correction is not _NO_VALUE:
        if ddof != 0:
            raise as_numpy_would(ValueError(
                "ddof and correction can't be provided simultaneously."))
        ddof = correction
    keepdims = _keepdims(keepdims)
    replaced, mask = _replace_nan(a, 0)
    if mask is None:
        return np.var(replaced, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    dtype = _inexact(dtype)
    count = np.sum(~mask, axis=axis, dtype=np.intp, keepdims=True)
    average = _divide_by_count(np.sum(replaced, axis=axis, dtype=dtype, keepdims=True), count)
    # NumPy subtracts in place, so the deviations keep the input's dtype.
    deviation = np.where(mask, 0, (replaced - average).astype(dtype_of(replaced)))
    variance = np.sum(deviation * deviation, axis=axis, dtype=dtype, keepdims=keepdims)
    dof = reshape(count, shape_of(variance)) - ddof
    # Slices with no degree of freedom left are NaN, never inf or a negative variance.
    return numpy_scalar(np.where(dof <= 0, np.nan, _divide_by_count(variance, dof)))


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO_VALUE, *,
           where=_NO_VALUE, mean=_NO_VALUE, correction=_NO_VALUE):
    return np.sqrt(nanvar(a, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims,
                          where=where, mean=mean, correction=correction))

