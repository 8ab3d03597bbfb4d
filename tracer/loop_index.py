"""The loop index as traced iterations see it (``tracer.loops``).

A captured loop's body is traced at two concrete indices and generalized: ints that
differ between the two recordings are taken as affine in the index. That is only right
when the body uses the index the affine way - in array indexing and ``t + c``, ``c * t``
arithmetic. Python code can use it otherwise, and two samples cannot tell::

    if t == 4: ...          # a branch taken at one step
    x[t % 3], x[min(t, 2)]  # non-affine arithmetic
    order[t]                # a Python list read at the index

So the traced iterations get a ``LoopIndex``: an ``int`` that stays one under affine
arithmetic and notes, with the user's line, every other use from user code: a comparison
whose answer is not the same over every index the loop will run (``t > 0`` is, for trips
1..T-1), ``//``, ``%``, ``abs``, ``**``, a float computed from it, a Python container read
at it. Any note refuses the capture (the loop unrolls, exact). tracejit's own code (index
normalization, bounds clamping) compares freely: bounds are checked when the loop runs.

>>> notes = IndexNotes(low=1, high=63)
>>> t = LoopIndex(1, notes)
>>> (t - 1) + 2 * t, t > 0, notes.problems
(2, True, [])
"""

from __future__ import annotations

import sys

from .locations import is_tracejit, user_location


class IndexNotes:
    """What a pair of traced iterations did with the index: ``problems`` (text with the
    user's line). ``low``/``high`` bound every index the captured loop runs."""

    def __init__(self, low, high):
        self.low, self.high = low, high
        self.problems = []

    def note(self, what):
        location = user_location(skip=3)
        at = f" at {location.short}" if location is not None else ""
        text = f"{what}{at}"
        if text not in self.problems:
            self.problems.append(text)


def _from_user():
    """Whether the operation (the first caller outside this module) is user code,
    or a builtin the user called (``min(t, 2)`` runs inside the front end's call hook)."""
    frame = sys._getframe(1)
    while frame.f_code.co_filename == __file__:
        frame = frame.f_back
    code = frame.f_code
    return not is_tracejit(code.co_filename) or (
        code.co_name == "call" and code.co_filename.endswith("frontend.py"))


def _plain_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


class LoopIndex(int):
    """An int standing for the loop index in a traced iteration (see the module)."""

    def __new__(cls, value, notes, scale=1, offset=0):
        index = super().__new__(cls, value)
        index.notes = notes
        index.scale, index.offset = scale, offset  # value == scale * t + offset
        return index

    def _affine(self, value, scale, offset):
        return LoopIndex(value, self.notes, scale, offset)

    def _mixed(self, other, result):
        """``t + v`` for a non-int ``v``: a dim (``t + HH``) or an array stays as it is (the
        two traced steps generalize what it gives); a float is noted."""
        if isinstance(other, (float, complex)):
            return self._other("a float computed from the loop index", result)
        return result

    def _other(self, what, result):
        if _from_user():
            self.notes.note(what)
        return result

    # affine arithmetic stays an index -------------------------------------------------
    def __add__(self, other):
        if _plain_int(other) and not isinstance(other, LoopIndex):
            return self._affine(int(self) + int(other), self.scale, self.offset + int(other))
        if isinstance(other, LoopIndex):
            return self._affine(int(self) + int(other), self.scale + other.scale,
                                self.offset + other.offset)
        return self._mixed(other, int(self) + other)

    __radd__ = __add__

    def __sub__(self, other):
        if _plain_int(other) and not isinstance(other, LoopIndex):
            return self._affine(int(self) - int(other), self.scale, self.offset - int(other))
        if isinstance(other, LoopIndex):
            return self._affine(int(self) - int(other), self.scale - other.scale,
                                self.offset - other.offset)
        return self._mixed(other, int(self) - other)

    def __rsub__(self, other):
        if _plain_int(other):
            return self._affine(int(other) - int(self), -self.scale, int(other) - self.offset)
        return self._mixed(other, other - int(self))

    def __mul__(self, other):
        if _plain_int(other) and not isinstance(other, LoopIndex):
            factor = int(other)
            return self._affine(int(self) * factor, self.scale * factor, self.offset * factor)
        if isinstance(other, LoopIndex):
            return self._other("the loop index multiplied by itself", int(self) * int(other))
        return self._mixed(other, int(self) * other)

    __rmul__ = __mul__

    def __neg__(self):
        return self._affine(-int(self), -self.scale, -self.offset)

    def __pos__(self):
        return self

    # anything else is noted ----------------------------------------------------------
    def __floordiv__(self, other):
        return self._other("t // k on the loop index", int(self) // other)

    def __rfloordiv__(self, other):
        return self._other("k // t on the loop index", other // int(self))

    def __mod__(self, other):
        return self._other("t % k on the loop index", int(self) % other)

    def __rmod__(self, other):
        return self._other("k % t on the loop index", other % int(self))

    def __divmod__(self, other):
        return self._other("divmod of the loop index", divmod(int(self), other))

    def __truediv__(self, other):
        return self._other("a float computed from the loop index", int(self) / other)

    def __rtruediv__(self, other):
        return self._other("a float computed from the loop index", other / int(self))

    def __pow__(self, other, modulo=None):
        return self._other("a power of the loop index", pow(int(self), other, modulo))

    def __rpow__(self, other):
        return self._other("a power of the loop index", pow(other, int(self)))

    def __abs__(self):
        low, high = self._range()
        if low >= 0:
            return self
        return self._other("abs() of the loop index", abs(int(self)))

    def __and__(self, other):
        return self._other("a bitwise operation on the loop index", int(self) & other)

    __rand__ = __and__

    def __or__(self, other):
        return self._other("a bitwise operation on the loop index", int(self) | other)

    __ror__ = __or__

    def __xor__(self, other):
        return self._other("a bitwise operation on the loop index", int(self) ^ other)

    __rxor__ = __xor__

    def __lshift__(self, other):
        return self._other("a shift of the loop index", int(self) << other)

    def __rshift__(self, other):
        return self._other("a shift of the loop index", int(self) >> other)

    def __float__(self):
        return self._other("a float computed from the loop index", float(int(self)))

    # comparisons: fine when every trip gives the same answer ---------------------------
    def _range(self):
        """The least and greatest value over every index the loop runs."""
        ends = (self.scale * self.notes.low + self.offset,
                self.scale * self.notes.high + self.offset)
        return min(ends), max(ends)

    def _compare(self, other, op, symbol):
        value = op(int(self), other)
        if not _from_user():
            return value
        if _plain_int(other) and not isinstance(other, LoopIndex):
            low, high = self._range()
            if symbol in ("==", "!="):
                same = not low <= other <= high or low == high == other
            else:
                same = op(low, other) == op(high, other)  # monotonic in the index
            if same:
                return value
        self.notes.note(f"`t {symbol} ...` on the loop index (Python control flow that may "
                        "change from step to step)")
        return value

    def __eq__(self, other):
        return self._compare(other, lambda a, b: a == b, "==")

    def __ne__(self, other):
        return self._compare(other, lambda a, b: a != b, "!=")

    def __lt__(self, other):
        return self._compare(other, lambda a, b: a < b, "<")

    def __le__(self, other):
        return self._compare(other, lambda a, b: a <= b, "<=")

    def __gt__(self, other):
        return self._compare(other, lambda a, b: a > b, ">")

    def __ge__(self, other):
        return self._compare(other, lambda a, b: a >= b, ">=")

    def __bool__(self):
        return bool(self._compare(0, lambda a, b: a != b, "!="))

    __hash__ = int.__hash__

    def __reduce__(self):
        return (int, (int(self),))


def read_at_index(container, key):
    """``container[key]`` where ``key`` mentions the loop index: a Python list, tuple or
    dict read at a ``LoopIndex`` is noted (its items would be frozen per step)."""
    if isinstance(key, LoopIndex) and type(container) in (list, tuple, dict, str):
        key.notes.note(f"a Python {type(container).__name__} read at the loop index (pass an "
                       "array to read it at a captured loop's index)")
    return container[key]
