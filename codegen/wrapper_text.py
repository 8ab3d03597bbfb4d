"""Python source of a generated wrapper, from its AST (``codegen/program.py`` builds it).

A warm start from the disk cache renders every program's wrapper again (the disk copy is
never run: ``program.rebuild_wrapper``), and ``ast.unparse``, a visitor in Python, was
most of that: ~1 ms of a fresh process for the MLP train step. The wrapper uses a few
forms - names, calls, plain constants, tuples, ``a.b``, ``a[0]``, one-target assignments,
``if``/``return``/``raise`` - and those are written here directly; anything else (a dim
expression, a slice, a float) goes to ``ast.unparse``, in parentheses. The text is only
ever compiled and compared, so it need not look like ``ast.unparse``'s; it must be Python
that means the same as the tree, which tests/codegen/test_wrapper_text.py checks against
``ast.unparse`` for every form.

>>> import ast
>>> source(ast.parse("f(x, (1,), 'u1', y.shape[0], n=s0 // 2)", mode="eval").body)
"f(x, (1,), 'u1', y.shape[0], n=(s0 // 2))"
"""

from __future__ import annotations

import ast

_PLAIN_CONSTANTS = (int, str, bool, type(None))  # repr is their Python source


def source(node):
    """The Python source of expression ``node``."""
    kind = type(node)
    if kind is ast.Name:
        return node.id
    if kind is ast.Constant and type(node.value) in _PLAIN_CONSTANTS:
        return repr(node.value)
    if kind is ast.Tuple:
        items = [source(item) for item in node.elts]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if kind is ast.Attribute and type(node.value) is ast.Name:
        return f"{node.value.id}.{node.attr}"
    if (kind is ast.Call and type(node.func) in (ast.Name, ast.Attribute)
            and all(keyword.arg is not None for keyword in node.keywords)
            and not any(type(arg) is ast.Starred for arg in node.args)):
        arguments = [source(arg) for arg in node.args]
        arguments += [f"{keyword.arg}={source(keyword.value)}" for keyword in node.keywords]
        return f"{source(node.func)}({', '.join(arguments)})"
    if (kind is ast.Subscript and type(node.value) in (ast.Name, ast.Attribute)
            and type(node.slice) is ast.Constant and type(node.slice.value) is int):
        return f"{source(node.value)}[{node.slice.value!r}]"
    return f"({ast.unparse(node)})"


def statement_lines(node, depth=0):
    """The lines of statement ``node``, indented ``depth`` levels."""
    indent = "    " * depth
    kind = type(node)
    if kind is ast.Assign and len(node.targets) == 1 and type(node.targets[0]) is ast.Name:
        return [f"{indent}{node.targets[0].id} = {source(node.value)}"]
    if kind is ast.Return:
        return [f"{indent}return" + ("" if node.value is None else f" {source(node.value)}")]
    if kind is ast.Raise and node.exc is not None and node.cause is None:
        return [f"{indent}raise {source(node.exc)}"]
    if kind is ast.Expr:
        return [f"{indent}{source(node.value)}"]
    if kind is ast.If and not node.orelse:
        lines = [f"{indent}if {source(node.test)}:"]
        for statement in node.body:
            lines += statement_lines(statement, depth + 1)
        return lines
    if not hasattr(node, "lineno"):  # ast.unparse reads it (type comments)
        node = ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[])).body[0]
    return [indent + line for line in ast.unparse(node).splitlines()]


def function_source(function):
    """``def name(a, b):`` and its body, for a function of plain positional parameters."""
    parameters = ", ".join(argument.arg for argument in function.args.args)
    lines = [f"def {function.name}({parameters}):"]
    for statement in function.body:
        lines += statement_lines(statement, 1)
    return "\n".join(lines) + "\n"
