"""The differential suite's tally: what was compared, printed at the end of the run.

Every test that compares compiled with eager records the summary that
``tracejit.testing.assert_compiled_matches_eager`` returned (or its own counts) through the
``differential_tally`` fixture; the terminal summary then says how much was compared::

    differential: 118 model functions, 520 argument sets, 1150 compiled calls compared

followed by one line per kind (corpus, gradients, layouts, random programs, ...). Only
comparisons that passed are counted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import pytest


@dataclass
class _Kind:
    functions: set = field(default_factory=set)
    argument_sets: int = 0
    calls: int = 0
    compiled_calls: int = 0


class DifferentialTally:
    """Counts per kind of comparison; ``function`` is any hashable naming the model."""

    def __init__(self):
        self.kinds = defaultdict(_Kind)

    def record(self, kind, function, summary):
        entry = self.kinds[kind]
        entry.functions.add(function)
        entry.argument_sets += summary["argument_sets"]
        entry.calls += summary["calls"]
        entry.compiled_calls += summary["compiled_calls"]

    def lines(self):
        if not self.kinds:
            return []
        functions = set().union(*(entry.functions for entry in self.kinds.values()))
        argument_sets = sum(entry.argument_sets for entry in self.kinds.values())
        compiled = sum(entry.compiled_calls for entry in self.kinds.values())
        calls = sum(entry.calls for entry in self.kinds.values())
        lines = [f"differential: {len(functions)} model functions, {argument_sets} argument "
                 f"sets, {compiled} compiled calls compared ({calls} calls in all)"]
        for kind in sorted(self.kinds):
            entry = self.kinds[kind]
            lines.append(f"  {kind}: {len(entry.functions)} functions, {entry.argument_sets} "
                         f"argument sets, {entry.calls} calls, {entry.compiled_calls} compiled")
        return lines


TALLY = DifferentialTally()


def pytest_terminal_summary(terminalreporter):
    for line in TALLY.lines():
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def differential_tally():
    """The session's ``DifferentialTally``: ``record(kind, function, summary)``."""
    return TALLY
