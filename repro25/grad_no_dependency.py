"""jit(value_and_grad(f)) returns a gradient where eager value_and_grad raises TypeError
('grad requires program to return a scalar that depends on the differentiated arguments'):
every row of x is skipped by `continue`, so eagerly the loss never touched w; the compiled
loop (captured once the length is dynamic) depends on w structurally. fuzz25 grad_loops,
seed 5034 (call 5). Run: .venv/bin/python repro25/grad_no_dependency.py"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "differential"))
import fuzz  # noqa: E402
import fuzz25  # noqa: E402

import tracejit as tj  # noqa: E402

program = fuzz25.draw(5034, ["grad_loops"])
print(program.source)
function = fuzz.load(program.source)
stepped = tj.jit(tj.value_and_grad(function), cache="memory")
for call in range(program.calls):
    w, x = program.make(call)
    try:
        want = tj.value_and_grad(function)(w.copy(), x.copy())[1]
    except TypeError:
        want = "TypeError"
    try:
        got = stepped(w.copy(), x.copy())[1]
    except TypeError:
        got = "TypeError"
    print(call, x.shape, "eager:", want if isinstance(want, str) else want.ravel()[:3],
          "jit:", got if isinstance(got, str) else got.ravel()[:3])
