"""Python functions written as source text at run time, then ``exec``'d once.

Five hot paths are generated as straight-line Python rather than interpreted from their
records on every call: the entry guards (``runtime/guards.py``), the writes a compiled
call stores (``tracer/write_source.py``), the check that paths reach one object as when
traced (``tracer/shared_objects.py``), the result of a compiled call
(``runtime/result_source.py``) and a program's wrapper around its native entry
(``codegen/program.wrapper_source``, defined by ``codegen/program.link``). ``Source`` is
what they share: lines of text, the values the text names, and ``define``, which compiles
the text and keeps it on the function (``function.source``) for ``explain`` and debugging.

Values never become text: ``constant(value)`` binds a value to a fresh name and the text
holds only that name (a spec read from a disk cache cannot write code). Callers put into
text only what they checked themselves (ints, identifiers, operators).

    >>> source = Source()
    >>> source.add("def scaled(x):", depth=0)
    >>> source.add(f"return x * {source.constant(3)} + {source.constant([1], 'L')}[0]")
    >>> scaled = source.define("scaled", "example")
    >>> scaled(2), scaled.source
    (7, 'def scaled(x):\\n    return x * _K0 + _L1[0]\\n')
"""

from __future__ import annotations


class Source:
    """A function being written: ``lines``, the ``names`` they read (``constant``,
    ``bind``), and ``indent``, added to the depth of every line ``add`` writes (for
    statements nested in a branch the caller opens)."""

    def __init__(self):
        self.lines = []
        self.names = {}
        self.indent = 0
        self._named = {}  # id(value) -> its name: one name per object

    def constant(self, value, prefix="K"):
        """The name the text uses for ``value`` (``_K0``, ``_T3``...; the same object
        keeps its first name). The value stays bound in ``names``, so its id is not
        reused while the function lives."""
        name = self._named.get(id(value))
        if name is None:
            name = self._named[id(value)] = f"_{prefix}{len(self._named)}"
            self.names[name] = value
        return name

    def bind(self, names):
        """Bind ``names`` (a dict: name -> value) as they are, for text that uses those
        names itself (a program wrapper's statements). A name already bound to another
        value is an error: two parts of the text would read one name for two values.

        >>> source = Source()
        >>> source.bind({"_empty": list})
        >>> source.bind({"_empty": dict})
        Traceback (most recent call last):
        ...
        ValueError: generated code: names ['_empty'] are bound twice
        """
        collisions = [name for name, value in names.items()
                      if name in self.names and self.names[name] is not value]
        if collisions:
            raise ValueError(f"generated code: names {sorted(collisions)} are bound twice")
        self.names.update(names)

    def add(self, line, depth=1):
        """Append ``line`` at ``depth`` (plus ``indent``) levels of four spaces."""
        self.lines.append("    " * (depth + self.indent) + line)

    def define(self, name, what):
        """Compile the text and return its function ``name``, with the text as its
        ``source``; ``what`` names the text in tracebacks (``<tracejit what>``)."""
        text = "\n".join(self.lines) + "\n"
        namespace = dict(self.names)
        exec(compile(text, f"<tracejit {what}>", "exec"), namespace)  # noqa: S102
        function = namespace[name]
        function.source = text
        return function
