"""Symbolic dimensions.

``DimExpr`` is IR data: an integer polynomial over dim symbols (``2*s0*s1 + 3``), with
floor division and modulo kept as opaque factors when they do not divide exactly. It is
immutable, hashable, compared structurally, and printed in a form ``parse_dim`` reads back.

``SymInt`` is what the tracer hands to user code and to shape rules: a ``DimExpr`` plus
the concrete value of this call and a ``context`` that decides comparisons. A comparison
whose answer is the same across every symbol's bucket range is answered with no guard;
otherwise the context answers from the concrete value and records a shape guard. Using a
``SymInt`` where Python needs an int (``range(n)``) specializes it with a guard.

>>> s0 = DimExpr.symbol("s0")
>>> str((s0 * 6 + 3) // 3), str(s0 * 2 - s0 - s0)
('2*s0 + 1', '0')
>>> parse_dim("2*s0 + 1") == s0 * 2 + 1
True
"""

from __future__ import annotations

import ast
import keyword
import math
import operator
import re
import sys

from .primitives import current_context


class DimExpr:
    """An integer polynomial: ``terms`` maps monomials (sorted tuples of factors: symbol
    names or ``Opaque`` nodes) to integer coefficients; ``()`` is the constant term."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms):
        items = tuple(sorted(((m, c) for m, c in terms.items() if c), key=_term_key))
        self.terms = items
        self._hash = hash(items)

    # --- construction ----------------------------------------------------------------
    @staticmethod
    def symbol(name):
        return DimExpr({(name,): 1})

    @staticmethod
    def make(terms):
        """A ``DimExpr``, or a plain ``int`` when the polynomial is constant."""
        expr = DimExpr(terms)
        if not expr.terms:
            return 0
        if len(expr.terms) == 1 and expr.terms[0][0] == ():
            return expr.terms[0][1]
        return expr

    # --- arithmetic (results are DimExpr or int) -------------------------------------
    def _as_terms(self):
        return dict(self.terms)

    def __add__(self, other):
        terms = self._as_terms()
        for monomial, coeff in _terms_of(other).items():
            terms[monomial] = terms.get(monomial, 0) + coeff
        return DimExpr.make(terms)

    __radd__ = __add__

    def __neg__(self):
        return DimExpr.make({m: -c for m, c in self.terms})

    def __sub__(self, other):
        return self + (-_as_expr(other))

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        terms = {}
        for m1, c1 in self.terms:
            for m2, c2 in _terms_of(other).items():
                monomial = tuple(sorted(m1 + m2, key=_factor_key))
                terms[monomial] = terms.get(monomial, 0) + c1 * c2
        return DimExpr.make(terms)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return floordiv(self, other)

    def __rfloordiv__(self, other):
        return floordiv(other, self)

    def __mod__(self, other):
        return mod(self, other)

    def __rmod__(self, other):
        return mod(other, self)

    # --- structure --------------------------------------------------------------------
    def __eq__(self, other):
        return isinstance(other, DimExpr) and self.terms == other.terms

    def __hash__(self):
        return self._hash

    def symbols(self):
        names = set()
        for monomial, _ in self.terms:
            for factor in monomial:
                names |= {factor} if isinstance(factor, str) else factor.symbols()
        return names

    def evaluate(self, bindings):
        """The value with symbols bound to ints (``{"s0": 5}``)."""
        total = 0
        for monomial, coeff in self.terms:
            product = coeff
            for factor in monomial:
                product *= bindings[factor] if isinstance(factor, str) else factor.evaluate(
                    bindings
                )
            total += product
        return total

    def bounds(self, ranges):
        """``(low, high)`` over symbols in their inclusive ``ranges`` (non-negative; a
        ``%`` or ``//`` factor may be negative)."""
        low = high = 0
        for monomial, coeff in self.terms:
            m_low = m_high = 1
            for factor in monomial:
                f_low, f_high = ranges[factor] if isinstance(factor, str) else factor.bounds(
                    ranges
                )
                # (a factor may be negative: i % -2, i // -2)
                corners = (m_low * f_low, m_low * f_high, m_high * f_low, m_high * f_high)
                m_low, m_high = min(corners), max(corners)
            if coeff >= 0:
                low, high = low + coeff * m_low, high + coeff * m_high
            else:
                low, high = low + coeff * m_high, high + coeff * m_low
        return low, high

    def __str__(self):
        parts = []
        for monomial, coeff in self.terms:
            alone = len(monomial) == 1 and coeff == 1
            factors = [f if isinstance(f, str) else str(f) if alone else f"({f})" for f in monomial]
            if not factors:
                text = str(abs(coeff))
            elif abs(coeff) == 1:
                text = "*".join(factors)
            else:
                text = "*".join([str(abs(coeff)), *factors])
            if not parts:
                parts.append(text if coeff > 0 else "-" + text)
            else:
                parts.append(("+ " if coeff > 0 else "- ") + text)
        return " ".join(parts) if parts else "0"

    def __repr__(self):
        return f"DimExpr({self})"


class Opaque:
    """``numerator // denominator`` or ``numerator % denominator`` that does not simplify."""

    __slots__ = ("op", "numerator", "denominator", "_hash")

    def __init__(self, op, numerator, denominator):
        self.op, self.numerator, self.denominator = op, numerator, denominator
        self._hash = hash((op, numerator, denominator))

    def __eq__(self, other):
        return isinstance(other, Opaque) and (self.op, self.numerator, self.denominator) == (
            other.op,
            other.numerator,
            other.denominator,
        )

    def __hash__(self):
        return self._hash

    def symbols(self):
        names = set()
        for part in (self.numerator, self.denominator):
            if isinstance(part, DimExpr):
                names |= part.symbols()
        return names

    def evaluate(self, bindings):
        numerator = _evaluate(self.numerator, bindings)
        denominator = _evaluate(self.denominator, bindings)
        return numerator // denominator if self.op == "//" else numerator % denominator

    def bounds(self, ranges):
        n_low, n_high = _bounds(self.numerator, ranges)
        d_low, d_high = _bounds(self.denominator, ranges)
        # Python's ``%`` takes the denominator's sign (``1 % -2 == -1``) and ``//`` floors:
        # a negative denominator (``i % k == 0`` with ``k = -2``) bounds them from below 0.
        # (A zero denominator raises when the call computes it.)
        signs = [(low, high) for low, high in ((max(d_low, 1), d_high), (d_low, min(d_high, -1)))
                 if low <= high] or [(1, 1)]
        if self.op == "%":
            return (min(0, *(low + 1 for low, _ in signs)),
                    max(0, *(high - 1 for _, high in signs)))
        # For a denominator of one sign, n // d is monotone in n and in d: the extremes are
        # at the corners.
        corners = [n // d for low, high in signs for d in (low, high) for n in (n_low, n_high)]
        return min(corners), max(corners)

    def __str__(self):
        def numerator(part):
            return str(part) if isinstance(part, int) or len(part.terms) == 1 else f"({part})"

        def denominator(part):
            # Only an int or a bare symbol reads back unparenthesized after // or %.
            bare = isinstance(part, int) or (
                len(part.terms) == 1 and part.terms[0][1] == 1 and len(part.terms[0][0]) == 1
                and isinstance(part.terms[0][0][0], str)
            )
            return str(part) if bare else f"({part})"

        return f"{numerator(self.numerator)} {self.op} {denominator(self.denominator)}"


def _factor_key(factor):
    return (0, factor) if isinstance(factor, str) else (1, str(factor))


def _term_key(item):
    monomial, _ = item
    return (-len(monomial), tuple(_factor_key(f) for f in monomial))


def _as_expr(value):
    return value if isinstance(value, DimExpr) else DimExpr({(): int(value)})


def _terms_of(value):
    return dict(value.terms) if isinstance(value, DimExpr) else {(): int(value)}


def _evaluate(value, bindings):
    return value.evaluate(bindings) if isinstance(value, DimExpr) else value


def _bounds(value, ranges):
    return value.bounds(ranges) if isinstance(value, DimExpr) else (value, value)


def _exact_quotient(numerator, denominator):
    """``numerator / denominator`` if every term divides exactly, else ``None``."""
    d_terms = _terms_of(denominator)
    if len(d_terms) != 1:
        return _term_times(numerator, denominator)
    (d_monomial, d_coeff), = d_terms.items()
    quotient = {}
    for monomial, coeff in _terms_of(numerator).items():
        remaining = list(monomial)
        for factor in d_monomial:
            if factor not in remaining:
                return None
            remaining.remove(factor)
        if coeff % d_coeff:
            return None
        quotient[tuple(remaining)] = coeff // d_coeff
    return DimExpr.make(quotient)


def _split_multiples(numerator, denominator):
    """``(whole, rest)`` with ``numerator == denominator * whole + rest``: the terms of
    ``numerator`` whose coefficients ``denominator`` (a positive int) divides, and the
    others (the constant reduced to ``0 <= c < denominator``). ``(k*a + 3) // k`` is then
    ``a + 3 // k`` for every int ``a``: a strided slice's length over a padded size
    (``(2*((h - 3) // 2) + 3) // 2`` is ``(h - 3) // 2 + 1``) needs no guard."""
    whole, rest = {}, {}
    for monomial, coeff in _terms_of(numerator).items():
        quotient, remainder = divmod(coeff, denominator)
        if monomial and remainder:
            rest[monomial] = coeff
        else:
            whole[monomial] = quotient
            if remainder:
                rest[monomial] = remainder
    return DimExpr.make(whole), DimExpr.make(rest)


def _term_times(numerator, denominator):
    """The one-term ``q`` with ``numerator == q * denominator`` (both polynomials), else
    None: ``q`` divides the leading terms (``144*(a*b + a + b + 1)`` over ``2*(a*b + a +
    b + 1)`` is 72: the columns of an im2col's ``reshape(N*oh*ow, -1)``)."""
    n_terms, d_terms = _terms_of(numerator), _terms_of(denominator)
    if len(n_terms) != len(d_terms):
        return None
    (n_monomial, n_coeff), (d_monomial, d_coeff) = (
        min(terms.items(), key=_term_key) for terms in (n_terms, d_terms))
    quotient = _exact_quotient(DimExpr.make({n_monomial: n_coeff}),
                               DimExpr.make({d_monomial: d_coeff}))
    if quotient is None or quotient == 0:
        return None
    return quotient if _as_expr(quotient * denominator) == _as_expr(numerator) else None


def floordiv(numerator, denominator):
    if isinstance(numerator, int) and isinstance(denominator, int):
        return numerator // denominator
    exact = _exact_quotient(numerator, denominator)
    if exact is not None:
        return exact
    if isinstance(denominator, int) and denominator > 0:
        whole, rest = _split_multiples(numerator, denominator)
        if whole != 0:
            return whole + floordiv(rest, denominator)
    return DimExpr({(Opaque("//", numerator, denominator),): 1})


def mod(numerator, denominator):
    if isinstance(numerator, int) and isinstance(denominator, int):
        return numerator % denominator
    if _exact_quotient(numerator, denominator) is not None:
        return 0
    if isinstance(denominator, int) and denominator > 0:
        whole, rest = _split_multiples(numerator, denominator)
        if whole != 0:
            return mod(rest, denominator)
    return DimExpr({(Opaque("%", numerator, denominator),): 1})


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: floordiv, ast.Mod: mod}


def parse_dim(text):
    """Read a printed dim (``"2*s0 + 1"``, ``"(s0 + 1) // 2"``) back into ``DimExpr``/int."""
    text = text.strip()
    # Most dims are a number or a symbol: read as ast.parse would, without it (a warm
    # start from disk parses every dim of every graph it loads).
    if _DECIMAL.match(text):
        return int(text)
    if text.isascii() and text.isidentifier() and not keyword.iskeyword(text):
        return DimExpr.symbol(text)
    return _eval_dim(ast.parse(text, mode="eval").body)


_DECIMAL = re.compile(r"(0|[1-9][0-9]*)\Z")


def _eval_dim(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return DimExpr.symbol(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_dim(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_eval_dim(node.left), _eval_dim(node.right))
    raise ValueError(f"not a dim expression: {ast.unparse(node)}")


# --- the live symbolic int -------------------------------------------------------------
def _on_the_value(operation, reflected=False):
    """An int operator no dim expression has (``n & 1``, ``1 << n``, ``~n``): Python's,
    on the dim's value (specialized)."""

    def method(self, *other):
        value = self.context.specialize(self, "used in a bitwise operation")
        return operation(*other, value) if reflected else operation(value, *other)

    return method



class SymInt:
    """A dim (or int derived from dims) during tracing: expression + concrete value.

    ``context`` implements ``ranges`` (symbol -> (low, high)), ``decide(symint, op,
    other) -> bool`` for comparisons the ranges leave open, and ``specialize(symint,
    reason) -> int``. ``value`` is ``None`` where no call is being traced (the verifier).
    """

    __slots__ = ("expr", "value", "context")
    __tracejit_dim__ = True
    # In NumPy calls (np.sqrt(x.shape[-1])) a SymInt is a traced 0-d int64: the trace that
    # made it records the operation on the symbolic value instead of specializing it.
    __tracejit_priority__ = 2

    @staticmethod
    def __tracejit_bind__(prim, args, params):
        for arg in args:
            if isinstance(arg, SymInt):
                return arg.context.process(prim, args, params)
        return current_context().process(prim, args, params)  # np.arange(n): no operand

    # copy.deepcopy(len(x)) is the int itself, as for an int: a copy would copy the trace's
    # context, so the guards its comparisons record would go to a copy nobody checks
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from .ufunc_calls import array_ufunc  # cycle: ufunc_calls -> dims

        return array_ufunc(ufunc, method, *inputs, **kwargs)

    def __init__(self, expr, value, context):
        self.expr, self.value, self.context = expr, value, context

    def _combine(self, other, function):
        if isinstance(other, SymInt):
            other_expr, other_value = other.expr, other.value
        elif isinstance(other, int) and not isinstance(other, bool):
            other_expr = other_value = other
        elif isinstance(other, float):
            return self._traced(function, self, other)
        else:
            return NotImplemented
        value = None if self.value is None or other_value is None else function(
            self.value, other_value
        )
        return wrap(function(self.expr, other_expr), value, self.context)

    def _rcombine(self, other, function):
        if isinstance(other, float):
            if function in (floordiv, mod) and self == 0:
                return function(other, 0)  # ZeroDivisionError, as Python raises it
            return self._traced(function, other, self)
        if isinstance(other, int) and not isinstance(other, bool):
            value = None if self.value is None else function(other, self.value)
            return wrap(function(other, self.expr), value, self.context)
        return NotImplemented

    def __add__(self, other):
        return self._combine(other, operator.add)

    def __radd__(self, other):
        return self._rcombine(other, operator.add)

    def __sub__(self, other):
        return self._combine(other, operator.sub)

    def __rsub__(self, other):
        return self._rcombine(other, operator.sub)

    def __mul__(self, other):
        return self._combine(other, operator.mul)

    def __rmul__(self, other):
        return self._rcombine(other, operator.mul)

    def __floordiv__(self, other):
        return self._combine(other, floordiv)

    def __rfloordiv__(self, other):
        return self._rcombine(other, floordiv)

    def __mod__(self, other):
        return self._combine(other, mod)

    def __rmod__(self, other):
        return self._rcombine(other, mod)

    def __neg__(self):
        return wrap(-self.expr, None if self.value is None else -self.value, self.context)

    def __truediv__(self, other):
        if not isinstance(other, (int, float, SymInt)) or isinstance(other, bool):
            return NotImplemented
        if isinstance(other, SymInt) and other == 0:  # guarded: Python raises, NumPy not
            return self.value / 0
        return self._traced(operator.truediv, self, other)

    def __rtruediv__(self, other):
        if not isinstance(other, (int, float)) or isinstance(other, bool):
            return NotImplemented
        if self == 0:
            return other / 0  # ZeroDivisionError, as Python raises it
        return self._traced(operator.truediv, other, self)

    def __divmod__(self, other):
        if not is_int(other):
            return divmod(self.context.specialize(self, "divided with divmod()"), other)
        return self // other, self % other  # chunks, rest = divmod(T, k): both stay dims

    def __rdivmod__(self, other):
        if not is_int(other):
            return divmod(other, self.context.specialize(self, "divided with divmod()"))
        return other // self, other % self

    def __abs__(self):
        if surely(self, ">=", 0):
            return self
        return -self if surely(self, "<=", 0) else abs(self.context.specialize(self, "abs()"))

    def __pos__(self):
        return self

    __and__, __rand__ = _on_the_value(operator.and_), _on_the_value(operator.and_, True)
    __or__, __ror__ = _on_the_value(operator.or_), _on_the_value(operator.or_, True)
    __xor__, __rxor__ = _on_the_value(operator.xor), _on_the_value(operator.xor, True)
    __lshift__, __rlshift__ = _on_the_value(operator.lshift), _on_the_value(operator.lshift, True)
    __rshift__, __rrshift__ = _on_the_value(operator.rshift), _on_the_value(operator.rshift, True)
    __invert__ = _on_the_value(operator.invert)

    def __getattr__(self, name):
        # n.bit_length(), n.to_bytes(...) in user code: int's methods on the dim's value
        if name in _INT_ATTRIBUTES and self.value is not None and _from_user():
            return getattr(self.context.specialize(self, f"used through int.{name}"), name)
        raise AttributeError(f"'SymInt' object has no attribute '{name}'")

    def __pow__(self, other, modulo=None):
        if modulo is not None:  # pow(n, e, m): Python's modular power of the value
            return pow(self.context.specialize(self, "raised to a modular power"), other,
                       modulo)
        if isinstance(other, int) and not isinstance(other, bool) and 0 <= other <= 8:
            result = 1
            for _ in range(other):  # t ** 2 stays an int polynomial of the dim
                result = self * result
            return result
        if not isinstance(other, (int, float, SymInt)) or isinstance(other, bool):
            return NotImplemented
        if not isinstance(other, float):  # int ** negative int is a Python float
            other = float(other)
        if (other < 0 and self == 0) or (not other.is_integer() and self < 0):
            # 0 ** -1 raises, (-2) ** 0.5 is complex in Python: not NumPy's float
            return self.context.specialize(self, "raised to a power") ** other
        return self._traced(operator.pow, self, other)

    def __rpow__(self, other):
        if isinstance(other, float):
            return self._traced(operator.pow, other, self)  # 0.9 ** t: a discount
        if isinstance(other, int) and not isinstance(other, bool):
            return other ** self.context.specialize(self, "used as an exponent")
        return NotImplemented

    def _traced(self, function, left, right):
        """``function(left, right)`` as a value of the trace: a float that a dynamic dim or
        a loop index gives (``1.0 / N``, ``0.9 ** t``) stays a function of it (a weak
        float64, as the Python float it stands for) instead of specializing the dim."""
        if self.context is None or self.value is None:
            return function(*(self.value if item is self else item for item in (left, right)))
        from . import ops  # cycle: ops.structural -> dims

        result = ops.bind(getattr(ops, _TRACED_OPERATORS[function]), left, right)
        if function is operator.truediv and is_int(left) and is_int(right):
            result.quotient = (left, right)  # int(n / d) of dims is a dim (integer_quotient)
        return result

    # --- comparisons: answered over the bucket, or guarded ---------------------------
    def _compare(self, other, op):
        if isinstance(other, float) and not other.is_integer():
            op, other = _integer_comparison(op, other)
            if isinstance(op, bool):
                return op
        if isinstance(other, SymInt):
            rhs = other.expr
        elif isinstance(other, (int, float)) and not isinstance(other, bool):
            rhs = other = int(other)
        else:
            return NotImplemented
        answer = decide_by_bounds(self.expr - rhs, op, self.context.ranges)
        if answer is None:
            answer = self.context.decide(self, op, other)
        return answer

    def __eq__(self, other):
        return self._compare(other, "==")

    def __ne__(self, other):
        return self._compare(other, "!=")

    def __lt__(self, other):
        return self._compare(other, "<")

    def __le__(self, other):
        return self._compare(other, "<=")

    def __gt__(self, other):
        return self._compare(other, ">")

    def __ge__(self, other):
        return self._compare(other, ">=")

    def __hash__(self):
        # `n in {5, 6}` and `d[n]` on a plain dict compare hashes first, and hash(s0) is no
        # int's hash: the lookup would miss for every value without asking. In user code
        # (and always for a loop index being traced, tracejit.tracer.loop_index) the hash is the
        # value's, specialized with a guard; tracejit's own code hashes the expression.
        context = self.context
        if context is not None and self.value is not None:
            active = getattr(context, "loop_indices", None)
            if (active and not self.expr.symbols().isdisjoint(active)) or _from_user():
                return hash(context.specialize(self, "hashed (a set or dict lookup)"))
        return hash(self.expr)

    def __bool__(self):
        return bool(self != 0)

    # --- places where Python needs a real int -----------------------------------------
    def __index__(self):
        return self.context.specialize(self, "used as a Python int (index, range(), len())")

    def __int__(self):
        return self.context.specialize(self, "converted with int()")

    def __float__(self):
        return float(self.context.specialize(self, "converted with float()"))

    def __repr__(self):
        # str(x.shape), f"w_{d}", print(f"len={n}") in user code: the text eager makes
        # ('4'), so the dim is specialized; tracejit's own messages name the symbol.
        if self.value is not None and _from_user():
            return str(self.context.specialize(self, "turned into text (str, an f-string)"))
        return str(self.expr)

    __str__ = __repr__

    def __format__(self, spec):
        if self.value is not None and _from_user():
            return format(self.context.specialize(self, "turned into text (str, an f-string)"),
                          spec)
        return format(str(self.expr), spec)


_INT_ATTRIBUTES = frozenset({"bit_length", "bit_count", "to_bytes", "as_integer_ratio",
                             "conjugate", "is_integer", "numerator", "denominator", "real",
                             "imag"})


class SymRange:
    """``range(n)`` of a symbolic dim outside a ``for`` header (``scores[range(N), y]``):
    as an index it is ``np.arange(n)`` (the dim stays symbolic); anything else Python does
    with a range (``len``, iteration, ``list``) gets the real range, specializing the dim.

    >>> SymRange(0, 4, 1).real()
    range(0, 4)
    """

    def __init__(self, *bounds):
        self.bounds = bounds

    def real(self):
        return range(*(int(bound) for bound in self.bounds))

    def as_array(self):
        from .numpy_api import arange  # cycle: numpy_api -> dims

        return arange(*self.bounds)

    def __iter__(self):
        return iter(self.real())

    def __reversed__(self):
        return reversed(self.real())

    def __len__(self):
        return len(self.real())

    def __getitem__(self, key):
        return self.real()[key]

    def __contains__(self, value):
        return value in self.real()

    def __eq__(self, other):
        return self.real() == (other.real() if isinstance(other, SymRange) else other)

    __hash__ = None

    def __repr__(self):
        return f"range{self.bounds}"


def integer_quotient(value):
    """``int(n / d)`` (also ``math.floor``/``math.trunc``) for a traced ``n / d`` of ints and
    dims with ``n >= 0 < d``: the dim ``n // d`` (``int((w - f) / s) + 1`` sizes a pooling
    output), else None (the caller converts the value, guarding it)."""
    quotient = getattr(value, "quotient", None)
    if quotient is None:
        return None
    numerator, denominator = quotient
    if not (denominator > 0 and numerator >= 0):  # shape guards when the bucket leaves
        return None                                # them open
    return numerator // denominator


def is_int(value):
    """A Python int or a symbolic one (not a bool)."""
    return isinstance(value, SymInt) or (isinstance(value, int) and not isinstance(
        value, bool))


# Python operators on a SymInt whose result is a float: the primitive that computes it.
_TRACED_OPERATORS = {
    operator.add: "add_p",
    operator.sub: "subtract_p",
    operator.mul: "multiply_p",
    operator.truediv: "true_divide_p",
    operator.pow: "power_p",
    floordiv: "floor_divide_p",
    mod: "mod_p",
}

_COMPARE = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _integer_comparison(op, bound):
    """An int comparison equivalent to comparing an int with a non-integral float;
    ``(answer, None)`` where the answer does not depend on the int at all."""
    below = math.floor(bound)
    if op in ("==", "!="):
        return op == "!=", None
    return {"<": "<=", "<=": "<=", ">": ">", ">=": ">"}[op], below


def decide_by_bounds(difference, op, ranges):
    """``difference op 0`` when it is the same for every value in the symbols' ranges;
    ``None`` when it depends on where in the ranges the values fall."""
    answer = _decide_over(difference, op, ranges)
    if answer is None and isinstance(difference, DimExpr):
        relaxed = _floors_relaxed(difference, ranges)
        if relaxed is not None:
            answer = _decide_over(relaxed[0], op, relaxed[1])
    return answer


def _floors_relaxed(difference, ranges):
    """``(expr, ranges)``: ``difference`` times a positive int, each term ``c*(e // k)``
    (``k`` a positive int) written as ``(e - r)*c/k`` with a new symbol ``r``, the
    remainder, in ``[0, k - 1]``; ``None`` when there is no such term. Its sign is
    ``difference``'s for some ``r``, so what holds over the new ranges holds for
    ``difference``, and ``e`` may cancel where bounds of the floor alone could not: a
    strided slice's last element ``2*((h - 3) // 2) + 2`` is below ``h`` for every ``h``
    (``h - 3 - r + 2 - h = -1 - r``)."""
    expr, ranges = difference, dict(ranges)
    for count in range(8):
        floor = next(((monomial[0], coeff) for monomial, coeff in _terms_of(expr).items()
                      if len(monomial) == 1 and isinstance(monomial[0], Opaque)
                      and monomial[0].op == "//" and isinstance(monomial[0].denominator, int)
                      and monomial[0].denominator > 0), None)
        if floor is None:
            break
        (factor, coeff), k = floor, floor[0].denominator
        scale = k // math.gcd(coeff, k)
        remainder = f"%r{count}"  # no symbol's name (names are identifiers)
        ranges[remainder] = (0, k - 1)
        term = DimExpr({(factor,): coeff * scale})
        expr = expr * scale - term + (coeff * scale // k) * (
            factor.numerator - DimExpr.symbol(remainder))
        if isinstance(expr, int):
            break
    return (expr, ranges) if expr is not difference else None


def _decide_over(difference, op, ranges):
    if isinstance(difference, int):
        return _COMPARE[op](difference, 0)
    low, high = difference.bounds(ranges)
    if low == high:
        return _COMPARE[op](low, 0)
    if op in ("==", "!="):
        return (op == "!=") if (low > 0 or high < 0) else None
    if _COMPARE[op](low, 0) and _COMPARE[op](high, 0):
        return True
    if not _COMPARE[op](low, 0) and not _COMPARE[op](high, 0):
        return False
    return None


def _from_user():
    """Whether the caller of the caller (a ``SymInt`` method's caller) is user code, or a
    tracejit frame that calls on the user's behalf (``calls_for_the_user``: the user's
    ``table.get(n)`` or ``"{}".format(n)`` is called from there)."""
    from .locations import is_tracejit  # cycle: locations -> ir -> dims

    code = sys._getframe(2).f_code
    return code in _USER_CALLERS or not is_tracejit(code.co_filename)


_USER_CALLERS = set()


def calls_for_the_user(function):
    """Mark ``function`` as the frame from which tracejit makes the user's own calls: a
    dim hashed or turned into text there is the user's doing (see ``_from_user``)."""
    _USER_CALLERS.add(function.__code__)
    return function


def surely(value, op, other):
    """``value op other`` for every value the symbols' ranges allow, without a guard: for
    shortcuts that are not a path (``x[start:]`` with ``start == 0`` is ``x``; a slice at
    ``start`` computes the same), so a dim the ranges leave open takes the general path
    instead of specializing (a loop index, ``tracejit.tracer.loop_index``, would refuse capture)."""
    if isinstance(value, SymInt) or isinstance(other, SymInt):
        context = value.context if isinstance(value, SymInt) else other.context
        difference = expr_of(value) - expr_of(other)
        return decide_by_bounds(difference, op, context.ranges) is True
    return _COMPARE[op](value, other)


def wrap(expr, value, context):
    """A ``SymInt`` for a symbolic ``expr``; a plain int when ``expr`` is constant."""
    return SymInt(expr, value, context) if isinstance(expr, DimExpr) else expr


def expr_of(dim):
    """IR data for a dim: the ``DimExpr`` of a ``SymInt``, ints as they are."""
    return dim.expr if isinstance(dim, SymInt) else int(dim)


def value_of(dim):
    """The concrete value of a dim in this call."""
    return dim.value if isinstance(dim, SymInt) else int(dim)
