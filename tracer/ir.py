"""The IR: immutable records, a printer whose text ``parse_graph`` reads back, a verifier.

A ``Graph`` is SSA: ``inputs`` and ``constants`` define vars, each ``Eqn`` in ``body``
defines one more from a primitive applied to atoms (vars or literals). Guards sit in the
body where the trace met them: a ``Guard`` records what the trace assumed about data
(``bool(%4) == True`` for ``if x.sum() > 0:``); ``ShapeGuard``s record what it assumed
about symbolic dims. An ``Effect`` is a side effect (print) that compiled code replays.

    graph dynamic_graph_example
      symbols s0 in [3, 4]
      in %0: f64[s0]
      %1: f64[] = sum(%0; axes=(0,), keepdims=False)
      %2: bool[] = greater(%1, 0)
      guard bool(%2) == True  # model.py:12 in dynamic_graph_example: 'if x.sum() > 0:'
      %3: f64[s0] = multiply(%0, 2)
      return %3
"""

from __future__ import annotations

import ast
import hashlib
import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

from .abstract import AbstractArray
from .dims import DimExpr, SymInt, parse_dim, wrap
from .primitives import PRIMITIVES, Primitive

# --- dtypes in text --------------------------------------------------------------------
_SHORT_DTYPES = {
    "bool": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}
_DTYPE_NAMES = {dtype: name for name, dtype in _SHORT_DTYPES.items()}


def dtype_name(dtype):
    return _DTYPE_NAMES[np.dtype(dtype)]


def format_dim(dim):
    return str(dim)


def format_aval(aval):
    dims = ", ".join(format_dim(dim) for dim in aval.shape)
    text = f"{dtype_name(aval.dtype)}[{dims}]"
    return f"weak {text}" if aval.weak else text


# --- records ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Var:
    name: str
    aval: AbstractArray

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class Literal:
    """A scalar in the graph: a weak Python scalar, a NumPy scalar, or a symbolic int."""

    value: object
    aval: AbstractArray

    @staticmethod
    def of(value):
        if isinstance(value, SymInt):
            value = value.expr
        if isinstance(value, DimExpr):
            return Literal(value, AbstractArray((), np.int64, weak=True))
        if type(value) in (bool, int, float):  # np.float64 subclasses float but is strong
            return Literal(value, AbstractArray((), type(value), weak=True))
        value = np.asarray(value)[()]
        return Literal(value, AbstractArray((), value.dtype))

    def __eq__(self, other):
        return (
            isinstance(other, Literal)
            and self.aval == other.aval
            and type(self.value) is type(other.value)
            and _same_scalar(self.value, other.value)
        )

    def __hash__(self):
        return hash((self.aval, repr(self.value)))

    def __str__(self):
        value = self.value
        if isinstance(value, DimExpr):
            return f"dim({value})"
        text = _format_scalar(value.item() if isinstance(value, np.generic) else value)
        return text if self.aval.weak else f"{dtype_name(self.aval.dtype)}({text})"


def _same_scalar(a, b):
    if isinstance(a, DimExpr):
        return a == b
    return a == b or (a != a and b != b)  # NaN literals are equal to themselves here


def _format_scalar(value):
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return repr(value)


@dataclass(frozen=True)
class Constant:
    """An array folded into the graph (created inside the traced function)."""

    data: np.ndarray = field(compare=False)
    digest: str = ""

    @staticmethod
    def of(array):
        array = np.array(array, order="C")  # a copy; ascontiguousarray would make 0-d 1-d
        array.setflags(write=False)
        digest = hashlib.sha1(
            array.tobytes() + str((array.dtype.str, array.shape)).encode()
        ).hexdigest()
        return Constant(array, digest)

    def __str__(self):
        if self.data.size <= 16:
            return np.array2string(
                self.data, separator=", ", threshold=100, floatmode="unique"
            ).replace("\n", "")
        return f"<sha1:{self.digest}>"


@dataclass(frozen=True)
class Location:
    file: str
    line: int
    function: str = ""
    source: str = ""
    # The NumPy function an equation stands in for, when NumPy computes it otherwise
    # (``"np.einsum"``: a matmul its contraction became, which NumPy does not compute by
    # its matmul's BLAS calls; ``tracejit.tracer.margin_rules._matmul``).
    via: str = ""

    def __str__(self):
        where = f"{self.file}:{self.line}"
        if self.function:
            where += f" in {self.function}"
        return f"{where}: {self.source!r}" if self.source else where

    @property
    def short(self):
        return f"{os.path.basename(self.file)}:{self.line}"


@dataclass(frozen=True)
class Eqn:
    prim: Primitive
    inputs: tuple
    params: tuple  # sorted (name, value) pairs
    out: Var

    @property
    def params_dict(self):
        return dict(self.params)


@dataclass(frozen=True)
class Guard:
    """Compiled code checks ``convert(predicate) == expected``; ``convert`` is ``bool``
    (``if``, ``while``, ``and``), ``int``/``float``/``item``/``index`` (a value the trace
    used as a Python number), or ``margin``: checked as ``bool``, but its predicate says
    whether rounding could make the next guard at this location decide differently from
    NumPy (``tracejit.tracer.guard_margins``), so failing it runs the call eagerly and never grows
    another path."""

    predicate: object  # an atom
    convert: str
    expected: object
    location: Location | None = None


@dataclass(frozen=True)
class ShapeGuard:
    """The trace assumed ``lhs op rhs`` is ``expected`` for the dims of this call."""

    lhs: object  # DimExpr
    op: str
    rhs: object  # DimExpr or int
    expected: bool
    location: Location | None = None
    reason: str = ""

    def holds(self, bindings):
        lhs = self.lhs.evaluate(bindings) if isinstance(self.lhs, DimExpr) else self.lhs
        rhs = self.rhs.evaluate(bindings) if isinstance(self.rhs, DimExpr) else self.rhs
        return _COMPARE_TEXT[self.op](lhs, rhs) == self.expected


@dataclass(frozen=True)
class Effect:
    """A Python side effect that compiled code replays after all guards pass."""

    kind: str  # "print"
    inputs: tuple
    params: tuple
    location: Location | None = None


@dataclass(frozen=True)
class Symbol:
    name: str
    low: int
    high: int


@dataclass(frozen=True)
class Graph:
    name: str
    inputs: tuple
    constants: tuple  # (Var, Constant) pairs
    body: tuple  # Eqn | Guard | Effect
    outputs: tuple
    symbols: tuple = ()
    shape_guards: tuple = ()
    # Names of the values reverse mode recorded (the backward half of a joint forward +
    # backward graph): a discontinuity there picks a one-sided derivative at a kink, which
    # tracejit.tracer.discontinuities does not check. Not part of the graph's identity or
    # text (a parsed graph has none: every discontinuity is then checked).
    gradient_vars: frozenset = field(default=frozenset(), compare=False)
    # Names of the values a pass computed to check others (``tracejit.tracer.loop_bounds``'
    # bounds and ambiguity masks): the checks run on the graph again (a loop body compiled
    # alone) do not check them in turn. Like ``gradient_vars``, not part of the identity.
    check_vars: frozenset = field(default=frozenset(), compare=False)
    # Where the user's code made each equation (var name -> ``Location``): the margin guard
    # ``tracejit.tracer.discontinuities`` puts before a jump, and codegen's refusals, name
    # that line. Like ``gradient_vars``, not part of the identity or text (a parsed graph,
    # and equations passes made, have none).
    locations: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def equations(self):
        return tuple(item for item in self.body if isinstance(item, Eqn))

    @property
    def guards(self):
        return tuple(item for item in self.body if isinstance(item, Guard))

    @property
    def ranges(self):
        return {symbol.name: (symbol.low, symbol.high) for symbol in self.symbols}

    def constant_table(self):
        return {constant.digest: constant.data for _, constant in self.constants}

    def __str__(self):
        return format_graph(self)


CONVERSIONS = ("bool", "int", "float", "item", "index", "margin")

_COMPARE_TEXT = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


# --- printing --------------------------------------------------------------------------
def format_param(value):
    if isinstance(value, np.dtype):
        return dtype_name(value)
    if isinstance(value, tuple):
        inner = ", ".join(format_param(item) for item in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, DimExpr):
        return f"dim({value})"
    if isinstance(value, float):
        return _format_scalar(value)
    if isinstance(value, np.generic):
        return f"{dtype_name(value.dtype)}({_format_scalar(value.item())})"
    return repr(value)


def _format_call(name, inputs, params):
    arguments = ", ".join(str(atom) for atom in inputs)
    if params:
        keywords = ", ".join(f"{key}={format_param(value)}" for key, value in params)
        arguments = f"{arguments}; {keywords}" if arguments else f"; {keywords}"
    return f"{name}({arguments})"


def _comment(location):
    return f"  # {location}" if location is not None else ""


def format_item(item):
    if isinstance(item, Eqn):
        blocks = [(key, value) for key, value in item.params if isinstance(value, Graph)]
        if blocks:  # a loop: its body as an indented block (parse_graph cannot read it yet)
            params = tuple((key, value) for key, value in item.params
                           if not isinstance(value, Graph))
            call = _format_call(item.prim.name, item.inputs, params)
            body = "\n".join("    " + line for _, graph in blocks
                             for line in format_graph(graph).splitlines())
            return f"{item.out}: {format_aval(item.out.aval)} = {call} {{\n{body}\n  }}"
        call = _format_call(item.prim.name, item.inputs, item.params)
        return f"{item.out}: {format_aval(item.out.aval)} = {call}"
    if isinstance(item, Guard):
        expected = _format_scalar(item.expected)
        return f"guard {item.convert}({item.predicate}) == {expected}{_comment(item.location)}"
    if isinstance(item, Effect):
        call = _format_call(item.kind, item.inputs, item.params)
        return f"effect {call}{_comment(item.location)}"
    raise TypeError(f"not a graph item: {item!r}")


def format_shape_guard(guard):
    text = f"shape_guard {guard.lhs} {guard.op} {guard.rhs} is {guard.expected}"
    if guard.reason:
        text += f" ; {guard.reason!r}"
    return text + _comment(guard.location)


def format_graph(graph):
    lines = [f"graph {graph.name}"]
    lines += [f"  symbols {s.name} in [{s.low}, {s.high}]" for s in graph.symbols]
    lines += [f"  {format_shape_guard(guard)}" for guard in graph.shape_guards]
    lines += [f"  in {var}: {format_aval(var.aval)}" for var in graph.inputs]
    lines += [
        f"  const {var}: {format_aval(var.aval)} = {constant}" for var, constant in graph.constants
    ]
    lines += [f"  {format_item(item)}" for item in graph.body]
    lines.append("  return " + ", ".join(str(atom) for atom in graph.outputs))
    return "\n".join(lines)


# --- parsing ---------------------------------------------------------------------------
class ParseError(ValueError):
    pass


def parse_aval(text):
    text = text.strip()
    weak = text.startswith("weak ")
    if weak:
        text = text[len("weak ") :]
    name, _, rest = text.partition("[")
    if name not in _SHORT_DTYPES or not rest.endswith("]"):
        raise ParseError(f"not a type: {text!r}")
    inner = rest[:-1].strip()
    dims = tuple(parse_dim(part) for part in _split_top(inner)) if inner else ()
    return AbstractArray(dims, _SHORT_DTYPES[name], weak)


def _split_top(text, separator=","):
    """Split on ``separator`` outside parentheses and brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


_STRING_OR_VAR = re.compile(r"""('(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")|%(\d+)""")
_STRING_OR_COMMENT = re.compile(r"""('(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")|(  # )""")


def _rename_vars(text):
    """``%3`` -> ``_v3`` outside string literals (so the text is a Python expression)."""
    return _STRING_OR_VAR.sub(lambda m: m.group(1) or f"_v{m.group(2)}", text)


def _split_comment(line):
    for match in _STRING_OR_COMMENT.finditer(line):
        if match.group(2):
            return line[: match.start()].strip(), line[match.end():].strip()
    return line.strip(), None


def parse_location(text):
    if text is None:
        return None
    source = ""
    head = text
    if text.endswith(("'", '"')):
        head, _, quoted = text.partition(": ")
        while quoted and not _is_quoted(quoted):
            more_head, _, quoted = quoted.partition(": ")
            head = head + ": " + more_head
        source = ast.literal_eval(quoted)
    where, _, function = head.partition(" in ")
    file, _, line = where.rpartition(":")
    return Location(file, int(line), function, source)


def _is_quoted(text):
    try:
        return isinstance(ast.literal_eval(text), str)
    except (ValueError, SyntaxError):
        return False


class _Reader:
    """Evaluates the restricted expressions of the text form (atoms and parameters)."""

    def __init__(self, env):
        self.env = env

    def atom(self, node):
        if isinstance(node, ast.Name) and node.id.startswith("_v"):
            return self.variable("%" + node.id[2:])
        return Literal.of(self.scalar(node))

    def variable(self, name):
        if name not in self.env:
            raise ParseError(f"{name} is used before it is defined")
        return self.env[name]

    def scalar(self, node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "dim":
                return _dim_of(node.args[0])
            if node.func.id == "block":  # a loop body folded by _fold_blocks
                return self.blocks[node.args[0].value]
            if node.func.id in _SHORT_DTYPES:
                return _SHORT_DTYPES[node.func.id].type(self.scalar(node.args[0]))
        return self.param(node)

    def param(self, node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Tuple):
            return tuple(self.param(item) for item in node.elts)
        if isinstance(node, ast.Name):
            if node.id in _SHORT_DTYPES:
                return _SHORT_DTYPES[node.id]
            if node.id in ("inf", "nan"):
                return float(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.param(node.operand)
        if isinstance(node, ast.Call):
            return self.scalar(node)
        raise ParseError(f"cannot read {ast.unparse(node)!r}")


def _dim_of(node):
    return parse_dim(ast.unparse(node))


_STRING_OR_SEMICOLON = re.compile(r"""('(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")|(;)""")


_VARIABLES = re.compile(r"\s*%\d+(\s*,\s*%\d+)*\s*\Z")


def _split_arguments(inner):
    """``a, b; key=value`` -> (``a, b``, ``key=value``); ``;`` in strings is text."""
    for match in _STRING_OR_SEMICOLON.finditer(inner):
        if match.group(2):
            return inner[: match.start()], inner[match.end():]
    return inner, ""


def _parse_call(text, reader):
    """``name(a, b; key=value)`` as (name, atoms, params)."""
    name, _, rest = text.partition("(")
    if not rest.endswith(")"):
        raise ParseError(f"not a call: {text!r}")
    inner = rest[:-1]
    positional, keywords = _split_arguments(inner)
    if not keywords and _VARIABLES.match(positional):
        # Most lines: variables only, read as ``_Reader.atom`` reads them but without
        # ast.parse (a warm start from disk parses every graph it loads).
        atoms = tuple(reader.variable(part.strip()) for part in positional.split(","))
        return name.strip(), atoms, ()
    separator = "," if positional.strip() and keywords else ""
    source = f"f({_rename_vars(positional)}{separator}{_rename_vars(keywords)})"
    call = ast.parse(source, mode="eval").body
    atoms = tuple(reader.atom(arg) for arg in call.args)
    params = tuple(sorted((kw.arg, reader.param(kw.value)) for kw in call.keywords))
    return name.strip(), atoms, params


def parse_graph(text, constants=None):
    """Read ``format_graph``'s text back into an equal ``Graph``. Constants printed by
    digest are looked up in ``constants`` (``graph.constant_table()``)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("graph "):
        raise ParseError("the text does not start with 'graph NAME'")
    name = lines[0][len("graph ") :].strip()
    env = {}
    reader = _Reader(env)
    lines, reader.blocks = _fold_blocks(lines, constants)
    symbols, shape_guards, inputs, consts, body, outputs = [], [], [], [], [], None
    for raw in lines[1:]:
        code, comment = _split_comment(raw)
        keyword, _, rest = code.partition(" ")
        if keyword == "symbols":
            symbol, _, bounds = rest.partition(" in ")
            low, high = ast.literal_eval(bounds)
            symbols.append(Symbol(symbol.strip(), low, high))
        elif keyword == "shape_guard":
            expression, _, reason = rest.partition(" ; ")
            relation, _, expected = expression.rpartition(" is ")
            for op in ("==", "!=", "<=", ">=", "<", ">"):
                lhs, found, rhs = relation.partition(f" {op} ")
                if found:
                    break
            shape_guards.append(
                ShapeGuard(
                    parse_dim(lhs),
                    op,
                    parse_dim(rhs),
                    expected.strip() == "True",
                    parse_location(comment),
                    ast.literal_eval(reason) if reason else "",
                )
            )
        elif keyword == "in":
            var_name, _, type_text = rest.partition(":")
            var = Var(var_name.strip(), parse_aval(type_text))
            env[var.name] = var
            inputs.append(var)
        elif keyword == "const":
            declaration, _, value = rest.partition(" = ")
            var_name, _, type_text = declaration.partition(":")
            var = Var(var_name.strip(), parse_aval(type_text))
            env[var.name] = var
            consts.append((var, _parse_constant(value.strip(), var.aval, constants)))
        elif keyword == "guard":
            call, _, expected = rest.rpartition(" == ")
            convert, atoms, _ = _parse_call(call, reader)
            body.append(Guard(atoms[0], convert, _parse_scalar(expected), parse_location(comment)))
        elif keyword == "effect":
            kind, atoms, params = _parse_call(rest, reader)
            body.append(Effect(kind, atoms, params, parse_location(comment)))
        elif keyword == "return":
            if _VARIABLES.match(rest):  # as in _parse_call
                outputs = tuple(reader.variable(part.strip()) for part in rest.split(","))
            else:
                outputs = tuple(
                    reader.atom(ast.parse(_rename_vars(part), mode="eval").body)
                    for part in _split_top(rest)
                )
        elif keyword.startswith("%"):
            declaration, _, call = code.partition(" = ")
            var_name, _, type_text = declaration.partition(":")
            prim_name, atoms, params = _parse_call(call, reader)
            if prim_name not in PRIMITIVES:
                raise ParseError(f"unknown primitive {prim_name!r}")
            var = Var(var_name.strip(), parse_aval(type_text))
            env[var.name] = var
            body.append(Eqn(PRIMITIVES[prim_name], atoms, params, var))
        else:
            raise ParseError(f"cannot read line: {raw!r}")
    if outputs is None:
        raise ParseError("the graph has no 'return' line")
    return Graph(name, tuple(inputs), tuple(consts), tuple(body), outputs, tuple(symbols),
                 tuple(shape_guards))


def _fold_blocks(lines, constants):
    """Lines with each ``... = loop(...) {`` block folded into its header as a
    ``body=block(k)`` parameter; the blocks parsed as graphs."""
    folded, blocks, position = [], [], 0
    while position < len(lines):
        line = lines[position]
        code, _ = _split_comment(line)
        if not code.endswith(" {"):
            folded.append(line)
            position += 1
            continue
        indent = len(line) - len(line.lstrip())
        inner, position = [], position + 1
        while lines[position].strip() != "}" or (
            len(lines[position]) - len(lines[position].lstrip()) != indent
        ):
            inner.append(lines[position])
            position += 1
        position += 1
        depth = min(len(text) - len(text.lstrip()) for text in inner)
        blocks.append(parse_graph("\n".join(text[depth:] for text in inner), constants))
        header = code[: -len(" {")]
        separator = ", " if "; " in header else "; "
        folded.append(" " * indent + header[:-1] + f"{separator}body=block({len(blocks) - 1}))")
    return folded, blocks


def _parse_scalar(text):
    text = text.strip()
    return float(text) if text in ("inf", "-inf", "nan") else ast.literal_eval(text)


def _parse_constant(text, aval, table):
    if text.startswith("<sha1:"):
        digest = text[len("<sha1:") : -1]
        if not table or digest not in table:
            raise ParseError(f"constant {digest} is not in the constant table")
        return Constant.of(table[digest])
    values = ast.literal_eval(text.replace("nan", "None").replace("inf", "1e999"))
    array = np.array(values, dtype=object)
    array = np.where(array == None, np.nan, array)  # noqa: E711 - elementwise
    return Constant.of(np.array(array.tolist(), dtype=aval.dtype).reshape(aval.shape))


# --- verification ----------------------------------------------------------------------
class VerifyError(AssertionError):
    pass


class _VerifyContext:
    """Decides dim comparisons for re-running shape rules: by the symbols' ranges, else by
    the graph's shape guards (the assumptions the trace recorded)."""

    def __init__(self, graph):
        self.ranges = graph.ranges
        self.shape_guards = graph.shape_guards  # a loop body's verification assumes them too
        self.assumptions = {}
        for guard in graph.shape_guards:
            difference = guard.lhs - guard.rhs
            self.assumptions[(_key(difference), guard.op)] = guard.expected

    def decide(self, symint, op, other):
        difference = symint.expr - (other.expr if isinstance(other, SymInt) else other)
        for candidate_op, negate in _EQUIVALENT[op]:
            key = (_key(difference if not negate else -difference), candidate_op)
            if key in self.assumptions:
                return self.assumptions[key]
        opposite = {"==": "!=", "!=": "=="}.get(op)  # recorded once, as a == b or a != b
        if opposite is not None:
            for candidate_op, negate in _EQUIVALENT[opposite]:
                key = (_key(difference if not negate else -difference), candidate_op)
                if key in self.assumptions:
                    return not self.assumptions[key]
        raise VerifyError(f"a shape rule needs `{symint} {op} {other}`, which no shape guard "
                          "and no symbol range decides")

    def specialize(self, symint, reason):
        # A guard `expr == c` (as lhs - rhs == 0 holding) pins the value.
        for (terms, op), expected in self.assumptions.items():
            if op == "==" and expected and not isinstance(terms, int):
                value = symint.expr - DimExpr(dict(terms))
                if isinstance(value, int):
                    return value
        raise VerifyError(f"a shape rule needs the concrete value of {symint} ({reason})")


def _key(expr):
    return expr if isinstance(expr, int) else expr.terms


# (op on a - b) can be found as (op, a - b) or (mirrored op, b - a).
_EQUIVALENT = {
    "==": (("==", False), ("==", True)),
    "!=": (("!=", False), ("!=", True)),
    "<": (("<", False), (">", True)),
    ">": ((">", False), ("<", True)),
    "<=": (("<=", False), (">=", True)),
    ">=": ((">=", False), ("<=", True)),
}


def _symbolic(aval, context):
    shape = tuple(wrap(dim, None, context) for dim in aval.shape)
    return AbstractArray(shape, aval.dtype, aval.weak)


def _concrete_expr(dim):
    return dim.expr if isinstance(dim, SymInt) else dim


def _symbolic_param(value, context):
    if isinstance(value, DimExpr):
        return wrap(value, None, context)
    if isinstance(value, tuple):
        return tuple(_symbolic_param(item, context) for item in value)
    return value


class _Described:
    __slots__ = ("item",)

    def __init__(self, item):
        self.item = item

    def __format__(self, spec):
        return format_item(self.item)

    __str__ = __repr__ = lambda self: format_item(self.item)


def infer_aval(prim, inputs, params, context):
    """The aval of ``prim`` applied to ``inputs`` (atoms) with ``params`` (a dict), by its
    shape rule; ``context`` is ``_VerifyContext(graph)`` (``shape_context``)."""
    avals = [_symbolic(atom.aval, context) for atom in inputs]
    symbolic = {key: _symbolic_param(value, context) for key, value in params.items()}
    result = prim.abstract_eval(*avals, **symbolic)
    shape = tuple(_concrete_expr(dim) for dim in result.shape)
    return AbstractArray(shape, result.dtype)


def shape_context(graph):
    """What ``infer_aval`` decides dim comparisons by: ``graph``'s symbol ranges and shape
    guards."""
    return _VerifyContext(graph)


def verify(graph):
    """Check SSA form, types and shapes (by re-running every shape rule), guards, effects
    and symbols; raise ``VerifyError`` naming the first problem."""
    context = _VerifyContext(graph)
    defined = {}
    declared = {symbol.name for symbol in graph.symbols}

    def check_dims(aval, where):
        for dim in aval.shape:
            if isinstance(dim, DimExpr) and not dim.symbols() <= declared:
                raise VerifyError(f"{where} uses undeclared symbols {dim.symbols() - declared}")

    def define(var, where):
        if not isinstance(var, Var):
            raise VerifyError(f"{where} does not define a var")
        if var.name in defined:
            raise VerifyError(f"{var.name} is defined twice (SSA) at {where}")
        check_dims(var.aval, where)
        defined[var.name] = var

    def use(atom, where):
        if isinstance(atom, Var):
            if defined.get(atom.name) != atom:
                raise VerifyError(f"{where} uses {atom.name} before its definition")
        elif isinstance(atom, Literal):
            if atom.aval.shape != ():
                raise VerifyError(f"{where}: literal {atom} is not a scalar")
            if isinstance(atom.value, DimExpr) and not atom.value.symbols() <= declared:
                raise VerifyError(f"{where}: literal {atom} uses undeclared symbols")
        else:
            raise VerifyError(f"{where} uses {atom!r}, which is not an atom")

    for var in graph.inputs:
        define(var, f"input {var}")
    for var, constant in graph.constants:
        define(var, f"constant {var}")
        if constant.data.shape != var.aval.shape or constant.data.dtype != var.aval.dtype:
            raise VerifyError(f"constant {var} holds {constant.data.dtype}{constant.data.shape}")
    for item in graph.body:
        where = _Described(item)  # formatted only if a message needs it
        if isinstance(item, Eqn):
            for atom in item.inputs:
                use(atom, where)
            try:
                result = infer_aval(item.prim, item.inputs, item.params_dict, context)
            except VerifyError:
                raise
            except Exception as error:
                raise VerifyError(f"{where}: the shape rule rejects it: {error}") from error
            shape = result.shape
            if shape != item.out.aval.shape or result.dtype != item.out.aval.dtype:
                expected = format_aval(AbstractArray(shape, result.dtype))
                raise VerifyError(f"{where}: the shape rule gives {expected}")
            define(item.out, where)
        elif isinstance(item, Guard):
            use(item.predicate, where)
            if item.convert not in CONVERSIONS:
                raise VerifyError(f"{where}: unknown conversion {item.convert!r}")
            size = 1
            for dim in item.predicate.aval.shape:
                size = size * dim
            if size != 1:
                raise VerifyError(f"{where}: a guard's predicate must hold one element")
        elif isinstance(item, Effect):
            for atom in item.inputs:
                use(atom, where)
        else:
            raise VerifyError(f"unknown item in the body: {item!r}")
    for atom in graph.outputs:
        use(atom, "return")
    for guard in graph.shape_guards:
        for side in (guard.lhs, guard.rhs):
            if isinstance(side, DimExpr) and not side.symbols() <= declared:
                raise VerifyError(f"{format_shape_guard(guard)} uses undeclared symbols")
    return graph

