"""Split a program's LLVM module into parts that LLVM compiles on separate threads.

LLVM optimizes and emits one module on one thread; a program's kernels are independent
functions, so a module of several kernels can be cut between them, each part parsed in an
LLVM context of its own and compiled at the same time (``llvm.compile_module``), and the
object code of the parts linked into one library. On the MLP train step (14 kernels)
LLVM is about three quarters of the first call.

``split(ir_text, parts)`` works on the text ``llvmlite.ir`` prints: top-level lines are
``define`` blocks (to a line ``}``), ``declare``s, globals, metadata and the header. The
exported functions (the entries) stay in the first part; each function they call is a
*root* and goes, with the internal functions it calls, to the part with the least code so
far. A root called from another part becomes external in its own part and is declared in
the other; an internal function two parts call (a math library routine) is copied into
both, which is safe because functions hold no state. A module with a global that is not
a constant (profile counters) is never split: its copies would be two variables.

>>> text = '''
... define internal void @"k0"(ptr %".1")
... {
... entry:
...   ret void
... }
... define internal void @"k1"(ptr %".1")
... {
... entry:
...   ret void
... }
... define void @"entry"(ptr %".1")
... {
... entry:
...   call void @"k0"(ptr %".1")
...   call void @"k1"(ptr %".1")
...   ret void
... }'''
>>> first, second = split(text, 2, min_lines=0)
>>> 'declare void @"k1"(ptr %".1")' in first and 'define void @"k1"' in second
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MIN_LINES = 600  # below this the module compiles in ~30 ms: a second thread saves little
# The smallest part must hold this share of the code: the GEMM module split 10% / 90%
# (entries / the chunk function and its micro-kernels) saved ~10% of its compile and ran
# 1-3% slower (its calls into the chunk function no longer optimized with their callers).
MIN_SHARE = 0.25
PYTHON_ENTRY_SUFFIX = "_py"  # python_entry.add_python_entry: ``{entry}_py`` calls ``entry``
_NAME = re.compile(r'@(?:"((?:[^"\\]|\\.)*)"|([-\w.$]+))')
_REFERENCE = re.compile(r'@"?([\w.$]+)')
_VARIANT_ATTRIBUTE = "vector-function-abi-variant"
_VARIANT_NAME = re.compile(r"\(([\w.$]+)\)")
_LOCAL_LINKAGE = ("internal", "private")


@dataclass
class _Function:
    name: str
    lines: list
    local: bool  # internal or private: visible only in its module
    calls: set = field(default_factory=set)  # defined functions its text names


@dataclass
class _Items:
    header: list = field(default_factory=list)  # declares, globals, metadata, target lines
    functions: dict = field(default_factory=dict)
    splittable: bool = True


def split(ir_text, parts, min_lines=None, copied_prefixes=()):
    """``ir_text`` as up to ``parts`` module texts that together define what it defined
    (one text when there is nothing worth splitting: fewer than ``min_lines``, by
    default ``MIN_LINES``, lines of functions). Functions named with one of
    ``copied_prefixes`` are copied into each part that names them although they are
    external (the vector variants of ``llvm.compile_module``, named by call-site
    attributes and internalized after vectorization)."""
    least = MIN_LINES if min_lines is None else min_lines
    if parts < 2 or ir_text.count("\n") + 1 < least:
        return [ir_text]  # too few lines of any kind: not worth parsing (0.3 ms)
    items = _parse(ir_text, copied_prefixes)
    total = sum(len(function.lines) for function in items.functions.values())
    if not items.splittable or total < least:
        return [ir_text]
    # A program's entry is internal, called by its Python entry ``{entry}_py`` alone
    # (``python_entry.add_python_entry``), which inlines it: it stays with the exported
    # functions, and the kernels it calls are the roots.
    entries = {name[:-len(PYTHON_ENTRY_SUFFIX)] for name, function in items.functions.items()
               if not function.local and name.endswith(PYTHON_ENTRY_SUFFIX)}
    pinned = [name for name, function in items.functions.items()
              if not function.local or name in entries]
    copied_names = tuple(copied_prefixes)

    def local_callees(name, roots):
        return [callee for callee in sorted(items.functions[name].calls)
                if items.functions[callee].local and not callee.startswith(copied_names)
                and callee not in roots and callee not in entries]

    roots = []
    for name in pinned:
        roots += local_callees(name, roots)

    def reach(starts):
        """The local functions ``starts`` call, through any depth, except other roots."""
        found, stack = set(), list(starts)
        while stack:
            for callee in items.functions[stack.pop()].calls:
                function = items.functions[callee]
                if function.local and callee not in found and callee not in roots:
                    found.add(callee)
                    stack.append(callee)
        return found

    def size(names):
        return sum(len(items.functions[name].lines) for name in names)

    if len(roots) < 2:
        return [ir_text]

    members = [set(pinned) | reach(pinned)]
    members += [set() for _ in range(parts - 1)]
    loads = [size(members[0])] + [0] * (parts - 1)
    home = {}
    for root in sorted(roots, key=lambda root: -size({root} | reach([root]))):
        part = min(range(parts), key=loads.__getitem__)
        home[root] = part
        added = ({root} | reach([root])) - members[part]
        members[part] |= added
        loads[part] += size(added)
    copied = sum(loads) - total  # lines compiled in more than one part
    if sum(1 for load in loads if load) < 2 or copied > min(load for load in loads if load) / 2:
        return [ir_text]  # one part, or kernels sharing so much that each part redoes it
    if min(loads) < MIN_SHARE * sum(loads):
        return [ir_text]  # little time saved, and calls across parts are not optimized
    # What each part calls that another part defines: roots (made external at home) and
    # the first part's external functions (a kernel calling the GEMM's epilogue entry).
    foreign = [{callee for name in names for callee in items.functions[name].calls} - names
               for names in members]
    nameable = home.keys() | {name for name in pinned if not items.functions[name].local}
    if any(not nameable >= calls for calls in foreign):
        return [ir_text]  # a local function no part could name: keep the module whole
    called_across = set().union(*foreign) & home.keys()
    return [_text(items, names, called_across, calls) for names, calls in zip(members, foreign)]


def _text(items, names, called_across, foreign):
    """The module text of a part: its functions (those ``called_across`` external) and
    declarations of the ``foreign`` functions it calls."""
    lines = list(items.header)
    for name, function in items.functions.items():
        if name not in names:
            continue
        if name in called_across:
            lines += [_without_linkage(function.lines[0]), *function.lines[1:]]
        else:
            lines += function.lines
    lines += [_declaration(items.functions[name].lines[0]) for name in sorted(foreign)]
    return "\n".join(lines) + "\n"


def _parse(ir_text, copied_prefixes):
    items = _Items()
    lines = ir_text.splitlines()
    position = 0
    while position < len(lines):
        line = lines[position]
        if line.startswith("define "):
            end = lines.index("}", position)
            body = lines[position:end + 1]
            name = _defined_name(line)
            local = line.split()[1] in _LOCAL_LINKAGE or name.startswith(tuple(copied_prefixes))
            items.functions[name] = _Function(name, body, local)
            position = end + 1
            continue
        if line.startswith("@") and "=" in line:
            declaration = line.split("=", 1)[1].split()
            kind = [word for word in declaration if word in ("constant", "global")][:1]
            if "external" not in declaration and kind != ["constant"]:
                items.splittable = False  # a variable: two parts would hold two copies
        items.header.append(line)
        position += 1
    names = set(items.functions)
    for function in items.functions.values():
        # A function is named by ``@name`` (or ``@"name"``), and a vector variant also by
        # its call sites' ``vector-function-abi-variant`` attribute, as ``(name)``: one
        # search of the body for those, not a search of every token of every line (2 ms
        # of a 2,400-line module, before any part could start compiling).
        body = "\n".join(function.lines[1:])
        tokens = set(_REFERENCE.findall(body))
        if _VARIANT_ATTRIBUTE in body:
            tokens.update(_VARIANT_NAME.findall(body))
        function.calls = (tokens & names) - {function.name}
    return items


def _defined_name(line):
    match = _NAME.search(line)
    return match.group(1) if match.group(1) is not None else match.group(2)


def _without_linkage(header):
    words = header.split(" ")
    return " ".join(word for index, word in enumerate(words)
                    if not (index == 1 and word in _LOCAL_LINKAGE))


def _declaration(header):
    """``declare`` for the function a ``define`` line starts: its return type, name and
    parameter list, without linkage or function attributes."""
    before, after = header.split("@", 1)
    depth, end = 0, None
    for position, character in enumerate(after):
        if character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
            if depth == 0:
                end = position + 1
                break
    words = [word for word in before.split()[1:] if word not in _LOCAL_LINKAGE]
    return "declare " + " ".join(words) + " @" + after[:end]
