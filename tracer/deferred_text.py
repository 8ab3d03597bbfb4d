"""Formatted text whose only use is to be printed: rendered at run time from compiled values.

Every course's training loop prints a formatted cost::

    print("Cost after iteration %i: %f" % (i, cost))
    print(f"epoch {e}: loss {loss:.4f}")
    print("Cost after iteration {}: {}".format(i, np.squeeze(cost)))

The text of a computed float cannot be made while tracing (it would freeze the traced
value into the program: ``traced_array.FORMATTED_FLOAT``), but when the text goes nowhere
but to ``print`` it need not be made then at all. The front end (``defer_printed_text``)
rewrites a formatting expression written as a ``print`` argument (``%`` of a str literal,
an f-string, ``"...".format(...)`` of a str literal) into ``__tracejit__.deferred_text(
template, (values...))``: the ``Template`` (a constant: the literal text and, per
formatted value, its ``%`` spec or its format spec and conversion) and the values, each
evaluated once in Python's order. Anywhere else the text flows (stored, compared,
returned, ``len()``) stays as written, so it keeps refusing.

The hook gives a ``DeferredText``. ``Hooks.print`` turns it into a print segment
(``segment``): each traced value (or dim, or a captured loop's index) becomes one of the
print effect's atoms with how to render it and the type eager NumPy has there (``kind``:
a Python ``float``, a ``np.float64``, a 0-d array, ...); anything else is rendered at once.
Compiled code renders the text after every guard passed (``render_pieces``): it rebuilds
an object of eager's type from the compiled value and formats it with the very operation
eager runs (``"%.4f" % (np.float64(v),)``, ``format(float(v), ".3e")``), so the text is
eager's for that value. A ``DeferredText`` handed to anything but the builtin ``print``
(a rebound name) is made into text as written (``as_written``), refusing a traced float.

>>> import numpy as np
>>> template = percent_template("Cost after iteration %i: %f", 2)
>>> as_written(template, (100, np.float64(0.25)))
'Cost after iteration 100: 0.250000'
>>> render_pieces(((("text", "cost "), ("slot", 0, ("%", "%.3f"), ("scalar", "float64")))),
...               [np.array(0.5)])
'cost 0.500'
"""

from __future__ import annotations

import ast
import re
import string
import warnings

import numpy as np

from .dims import SymInt, calls_for_the_user
from .hook_calls import hook_call
from .locations import user_location
from .primitives import is_traced_array

# One conversion of printf-style formatting: %[flags][width][.precision][length]type. A
# mapping key (%(name)s) or a star width (%*d) reads the arguments another way: not
# deferred (as written).
_PERCENT = re.compile(r"%(?P<key>\([^)]*\))?(?P<flags>[-#0 +]*)(?P<width>\*|\d+)?"
                      r"(?:\.(?P<precision>\*|\d*))?[hlL]?(?P<type>.?)", re.S)
_PERCENT_TYPES = set("diouxXeEfFgGcrsa")
_CONVERSIONS = {-1: "", 115: "s", 114: "r", 97: "a"}  # ast.FormattedValue.conversion


# --- templates: what is constant in a formatting expression ------------------------------
def percent_template(text, count, single=False):
    """The ``Template`` of ``text % values`` with ``count`` values (``single``: the right
    side is one expression, not a tuple literal), or None when it reads them otherwise."""
    parts, position, slot = [], 0, 0
    for match in _PERCENT.finditer(text):
        parts.append(("text", text[position:match.start()]))
        position = match.end()
        if match["type"] == "%" and not (match["key"] or match["flags"] or match["width"]
                                         or match["precision"] is not None):
            parts.append(("text", "%"))
            continue
        if match["key"] or match["width"] == "*" or match["precision"] == "*" or (
                match["type"] not in _PERCENT_TYPES):
            return None
        parts.append(("slot", slot, ("%", match.group(0))))
        slot += 1
    parts.append(("text", text[position:]))
    if slot != count:
        return None
    return ("%", text, single, _joined(parts))


def format_template(text, count):
    """The ``Template`` of ``text.format(*values)`` with ``count`` positional values, or
    None for fields this does not defer (names, attributes, items, nested specs)."""
    parts, automatic, explicit = [], 0, False
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError:
        return None
    for literal, field, spec, conversion in fields:
        parts.append(("text", literal))
        if field is None:
            continue
        if "{" in (spec or "") or conversion not in (None, "s", "r", "a"):
            return None
        if field == "":
            if explicit:
                return None
            slot, automatic = automatic, automatic + 1
        elif field.isdigit():
            if automatic:
                return None
            slot, explicit = int(field), True
        else:
            return None
        if slot >= count:
            return None
        parts.append(("slot", slot, ("f", conversion or "", spec or "")))
    return ("format", text, False, _joined(parts))


def _joined(parts):
    """``parts`` with neighbouring text joined and empty text dropped."""
    joined = []
    for part in parts:
        if part[0] == "text" and joined and joined[-1][0] == "text":
            joined[-1] = ("text", joined[-1][1] + part[1])
        else:
            joined.append(part)
    return tuple(part for part in joined if part != ("text", ""))


# --- the front end ----------------------------------------------------------------------
def defer_printed_text(function_node):
    """``function_node`` with the formatting expressions written as ``print`` arguments
    made ``deferred_text`` hook calls (nested definitions and lambdas as written).

    >>> import ast
    >>> tree = ast.parse("def f(i, cost):\\n    print('%i: %f' % (i, cost), f'{cost:.2f}')")
    >>> print(ast.unparse(defer_printed_text(tree.body[0])).splitlines()[1])
        print(__tracejit__.deferred_text(('%', '%i: %f', False, (('slot', 0, ('%', '%i')), \
('text', ': '), ('slot', 1, ('%', '%f')))), (i, cost)), __tracejit__.deferred_text(('f', None, \
False, (('slot', 0, ('f', '', '.2f')),)), (cost,)))
    """
    for statement in function_node.body:
        _Printed().visit(statement)
    return function_node


class _Printed(ast.NodeVisitor):
    def visit_FunctionDef(self, node):
        pass  # a nested definition: as written (rewritten when it is called)

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "print":
            node.args = [deferred_call(arg) or arg for arg in node.args]

    def visit_Expr(self, node):
        """``sys.stdout.write("%f" % cost)`` as a statement (its count of characters
        unused): ``__tracejit__.write_text(sys.stdout.write, <deferred text>)``."""
        self.generic_visit(node)
        call = node.value
        if isinstance(call, ast.Call) and _is_stream_write(call.func) and len(
                call.args) == 1 and not call.keywords and (
                text := deferred_call(call.args[0])) is not None:
            node.value = ast.copy_location(hook_call("write_text", call.func, text), call)


def _is_stream_write(node):
    """``sys.stdout.write`` or ``sys.stderr.write``."""
    return isinstance(node, ast.Attribute) and node.attr == "write" and isinstance(
        node.value, ast.Attribute) and node.value.attr in ("stdout", "stderr") and isinstance(
        node.value.value, ast.Name) and node.value.value.id == "sys"


def deferred_call(node):
    """The ``deferred_text`` hook call standing for the formatting expression ``node``, or
    None when ``node`` is none (or one this does not defer)."""
    found = _template_of(node)
    if found is None:
        return None
    template, values = found
    call = hook_call("deferred_text", ast.Constant(template),
                     ast.Tuple(elts=values, ctx=ast.Load()))
    return ast.fix_missing_locations(ast.copy_location(call, node))


def _template_of(node):
    """``(Template, value expressions)`` of a formatting expression, else None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(
            node.left, ast.Constant) and type(node.left.value) is str:
        right = node.right
        if isinstance(right, ast.Tuple):
            if any(isinstance(item, ast.Starred) for item in right.elts):
                return None
            template = percent_template(node.left.value, len(right.elts))
            return None if template is None else (template, list(right.elts))
        if isinstance(right, (ast.Dict, ast.DictComp, ast.List, ast.ListComp, ast.Set)):
            return None
        template = percent_template(node.left.value, 1, single=True)
        return None if template is None else (template, [right])
    if isinstance(node, ast.JoinedStr):
        parts, values = [], []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(("text", part.value))
                continue
            spec = part.format_spec
            if spec is not None and not all(isinstance(inner, ast.Constant)
                                            for inner in spec.values):
                return None  # f"{x:.{digits}f}": a spec computed at run time
            text = "".join(inner.value for inner in spec.values) if spec is not None else ""
            parts.append(("slot", len(values), ("f", _CONVERSIONS[part.conversion], text)))
            values.append(part.value)
        if not values:
            return None
        return ("f", None, False, _joined(parts)), values
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr == "format") and isinstance(node.func.value, ast.Constant) and (
            type(node.func.value.value) is str) and not node.keywords and not any(
            isinstance(arg, ast.Starred) for arg in node.args) and node.args:
        template = format_template(node.func.value.value, len(node.args))
        return None if template is None else (template, list(node.args))
    return None


# --- trace time -------------------------------------------------------------------------
class DeferredText:
    """A formatting expression's ``Template`` and its values, not yet text: the argument
    ``print`` gets for it (see the module docstring)."""

    def __init__(self, template, values):
        self.template, self.values = template, tuple(values)

    def __repr__(self):
        return f"DeferredText({self.template[1]!r})"


@calls_for_the_user  # f"{x.shape}" of a dim, "%s" % [loss]: the user's text, as in print
def as_written(template, values):
    """The text Python makes of the formatting expression (for a ``DeferredText`` that
    is not printed, and eagerly)."""
    kind, text, single, parts = template
    if kind == "%":
        return text % (values[0] if single else tuple(values))
    if kind == "format":
        return text.format(*values)
    return "".join(part[1] if part[0] == "text" else format_slot(part[2], values[part[1]])
                   for part in parts)


@calls_for_the_user
def format_slot(how, value):
    """One formatted value's text, as the expression formats it: ``("%", "%.4f")`` or
    ``("f", conversion, spec)``."""
    if how[0] == "%":
        return how[1] % (value,)
    if how[1]:
        value = {"s": str, "r": repr, "a": ascii}[how[1]](value)
    return format(value, how[2])


def segment(context, deferred, atom_of, is_value, kind_of=None):
    """``(("formatted", pieces), text)`` of a printed ``DeferredText``: each value
    ``is_value`` says compiled code hands over becomes a slot rendered at run time (its atom
    index from ``atom_of``, its type from ``kind_of``, else ``eager_kind``), the rest text
    now. ``text`` is what the trace prints (None with ``kind_of``: the caller renders it).
    Raises ``TraceError`` (the call runs eagerly) for a value whose text cannot be
    deferred."""
    from .traced_array import FORMATTED_FLOAT, trace_error

    kind, text, single, parts = deferred.template
    values = deferred.values
    if kind == "%" and single and isinstance(values[0], (tuple, dict)):
        # "%s %s" % pair: the tuple's items are the values (a mapping: named slots)
        if _traced_float_in(values[0]):
            raise trace_error(FORMATTED_FLOAT, _location())
        text = as_written(deferred.template, values)
        return ("formatted", (("text", text),)), text
    pieces, texts = [], []
    for part in parts:
        if part[0] == "text":
            pieces.append(part)
            texts.append(part[1])
            continue
        _, position, how = part
        value = values[position]
        if is_value(value):
            if kind_of is not None:
                pieces.append(("slot", atom_of(value), how, kind_of(value)))
                continue
            slot_kind = eager_kind(context, value)
            shown = _checked_render(how, slot_kind, concrete(value))
            pieces.append(("slot", atom_of(value), how, slot_kind))
            texts.append(shown)
            continue
        if how in _AS_STR and (shape := dims_pieces(value, atom_of)) is not None:
            pieces.extend(shape)  # f"{x.shape}"
            texts.append(format_slot(how, concrete(value)))
            continue
        if _traced_float_in(value):
            raise trace_error(FORMATTED_FLOAT, _location())
        shown = format_slot(how, value)
        pieces.append(("text", shown))
        texts.append(shown)
    pieces = _joined(pieces)
    return ("formatted", pieces), None if kind_of is not None else "".join(texts)


# formatting a tuple of ints as str() does
_AS_STR = (("f", "", ""), ("f", "s", ""), ("f", "r", ""), ("%", "%s"), ("%", "%r"))


def dims_pieces(value, atom_of):
    """The pieces printing a tuple or list of ints and dims (``x.shape``) as ``str`` does,
    each dim a slot its atom (from ``atom_of``) fills at run time, so one program serves
    every size; None for any other value, or one holding no dim.

    >>> dims_pieces((SymInt("s0", 6, None), 3), lambda dim: 0)
    (('text', '('), ('slot', 0, ('f', '', ''), ('int',)), ('text', ', 3)'))
    >>> dims_pieces((1, 2), None) is None
    True
    """
    if type(value) not in (tuple, list) or not any(isinstance(item, SymInt) for item in value) \
            or not all(type(item) is int or isinstance(item, SymInt) for item in value):
        return None
    closing = ",)" if len(value) == 1 else ")"
    opening, closing = ("(", closing) if type(value) is tuple else ("[", "]")
    pieces = [("text", opening)]
    for position, item in enumerate(value):
        if position:
            pieces.append(("text", ", "))
        pieces.append(("slot", atom_of(item), ("f", "", ""), ("int",)) if isinstance(
            item, SymInt) else ("text", str(item)))
    pieces.append(("text", closing))
    return _joined(pieces)


def _location():
    return user_location(skip=3)


def _traced_float_in(value):
    items = value.values() if isinstance(value, dict) else (
        value if isinstance(value, (tuple, list)) else (value,))
    return any(is_traced_array(item) and item.dtype.kind in "fc" for item in items)


def eager_kind(context, value):
    """How ``value`` (traced, a dim, or a loop index) is rebuilt at run time: the type eager
    NumPy has there, with its dtype (``("float",)``, ``("scalar", "float64")``, ``("array",
    "float32")``)."""
    from .eager_agreement import eager_type

    python = eager_type(context, value) if type(value) is not int else int
    if python in (int, float, bool):
        return (python.__name__,)
    if python is np.ndarray:
        return ("array", value.dtype.name)
    return ("scalar", np.dtype(python).name)


def concrete(value):
    """``value`` with its dims made their values now, with no guard (the text is made
    again at run time)."""
    if isinstance(value, SymInt):
        return int(value.value)
    if type(value) in (tuple, list):
        return type(value)(concrete(item) for item in value)
    return getattr(value, "value", value)


def _checked_render(how, kind, value):
    """The text of ``value`` now; a value whose formatting raises or warns (``"%d"`` of
    NaN, ``"%f"`` of a 1-element array) is left to eager NumPy."""
    from .traced_array import trace_error

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return render_slot(how, kind, value)
    except Exception as error:  # noqa: BLE001 - eager raises or warns it itself
        raise trace_error(f"formatting a printed value raised {type(error).__name__}: "
                          f"{error}", _location()) from None


# --- run time -----------------------------------------------------------------------------
def rebuilt(kind, value):
    """An object of eager's type (``kind``) holding compiled ``value``."""
    if kind[0] == "array":
        return np.asarray(value, dtype=kind[1])
    if kind[0] == "scalar":
        return np.asarray(value, dtype=kind[1])[()]
    return {"int": int, "float": float, "bool": bool}[kind[0]](np.asarray(value)[()])


def render_slot(how, kind, value):
    return format_slot(how, rebuilt(kind, value))


def render_pieces(pieces, values):
    """The text of a print's formatted segment from its atoms' compiled ``values``."""
    return "".join(piece[1] if piece[0] == "text" else
                   render_slot(piece[2], piece[3], values[piece[1]]) for piece in pieces)


_KINDS = {"int": 1, "float": 1, "bool": 1, "scalar": 2, "array": 2}


def valid_pieces(pieces, count):
    """Whether ``pieces`` (read from disk) is a formatted segment over ``count`` atoms:
    texts, and slots with a known spec form and eager type."""
    if type(pieces) is not tuple:
        return False
    for piece in pieces:
        if type(piece) is not tuple or not piece:
            return False
        if piece[0] == "text":
            if len(piece) != 2 or type(piece[1]) is not str:
                return False
            continue
        if piece[0] != "slot" or len(piece) != 4:
            return False
        _, position, how, kind = piece
        if type(position) is not int or not 0 <= position < count:
            return False
        if not (type(how) is tuple and (
                (len(how) == 2 and how[0] == "%" and type(how[1]) is str
                 and _PERCENT.fullmatch(how[1]) is not None)
                or (len(how) == 3 and how[0] == "f" and how[1] in ("", "s", "r", "a")
                    and type(how[2]) is str))):
            return False
        if not (type(kind) is tuple and kind and _KINDS.get(kind[0]) == len(kind)):
            return False
        if len(kind) == 2 and (type(kind[1]) is not str or kind[1] not in _DTYPES):
            return False
    return True


_DTYPES = {np.dtype(code).name for code in "?bhilqBHILQefdgFDG"}
