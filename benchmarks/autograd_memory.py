"""Memory kept for the backward pass: compiled autograd's residuals vs eager autograd's tape.

    python -m benchmarks.autograd_memory

The MLP of DESIGN.md §6 (512×784 → 1024 → 10, relu, softmax cross-entropy, float32) is
run forward once with every weight requiring grad, two ways:

* eager: ``runtime`` Tensors record a ``PrimitiveNode`` per op; the arrays the tape keeps
  alive until ``backward`` are every node's ``primals`` and ``out``, counted once each
  (deduplicated by ``id``; views of one buffer are also counted once in the "buffers"
  figure);
* compiled: ``jit`` splits the joint graph so the forward saves only matmul, reduction and
  gather results (``Path.residual_bytes``, checked against the arrays the ``CompiledNode``
  actually holds) and the backward recomputes pointwise values; it also keeps its inputs.

Both are reported without the inputs (x, labels and the weights, which the caller holds
anyway) and with them. Goal: compiled ≤ eager in both. The gradients of both runs are
compared, so the figures are for a backward that gives the same answer. The table goes to
stdout and, with the machine's facts, to ``benchmarks/results/autograd_memory.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import numpy as np

from tracejit import jit, nn, tensor
from tracejit.runtime.autograd import CompiledNode, Node, OutputNode, PrimitiveNode

from .harness import machine_facts

SIZES = dict(batch=512, inputs=784, hidden=1024, classes=10)
SEED = 0
RESULTS_PATH = Path(__file__).resolve().parent / "results" / "autograd_memory.json"
PARAMETERS = ("w1", "b1", "w2", "b2")


def mlp_loss(x, labels, w1, b1, w2, b2):
    hidden = nn.relu(x @ w1 + b1)
    return nn.cross_entropy(hidden @ w2 + b2, labels)


def mlp_inputs(dtype):
    rng = np.random.default_rng(SEED)
    sizes = SIZES

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    return dict(
        x=normal(sizes["batch"], sizes["inputs"]),
        labels=rng.integers(0, sizes["classes"], sizes["batch"]),
        w1=normal(sizes["inputs"], sizes["hidden"], scale=sizes["inputs"] ** -0.5),
        b1=normal(sizes["hidden"], scale=0.1),
        w2=normal(sizes["hidden"], sizes["classes"], scale=sizes["hidden"] ** -0.5),
        b2=normal(sizes["classes"], scale=0.1),
    )


def arguments(inputs):
    """The call's arguments: the weights as leaf Tensors requiring grad."""
    return [tensor(inputs[name].copy(), requires_grad=True) if name in PARAMETERS
            else inputs[name] for name in ("x", "labels", *PARAMETERS)]


def _buffer(array):
    """The array that owns ``array``'s memory (views count once per buffer)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def held_arrays(arrays, input_ids):
    """Bytes of ``arrays`` counted once by ``id``, with and without the inputs, and once
    per underlying buffer."""
    unique = {id(array): array for array in arrays if isinstance(array, np.ndarray)}
    buffers = {id(_buffer(array)): _buffer(array) for array in unique.values()}
    input_buffers = {id(_buffer(array)) for array in unique.values() if id(array) in input_ids}
    return dict(
        arrays=len(unique),
        bytes_with_inputs=sum(array.nbytes for array in unique.values()),
        bytes_without_inputs=sum(array.nbytes for key, array in unique.items()
                                 if key not in input_ids),
        buffer_bytes_with_inputs=sum(array.nbytes for array in buffers.values()),
        buffer_bytes_without_inputs=sum(array.nbytes for key, array in buffers.items()
                                        if key not in input_buffers),
        largest=[dict(shape=list(array.shape), dtype=str(array.dtype), bytes=array.nbytes)
                 for array in sorted(unique.values(), key=lambda a: -a.nbytes)[:6]],
    )


def tape_nodes(root):
    """Every node reachable from ``root`` (iteratively)."""
    seen, stack = {id(root): root}, [root]
    while stack:
        for parent in stack.pop().parents:
            if isinstance(parent, Node) and id(parent) not in seen:
                seen[id(parent)] = parent
                stack.append(parent)
    return list(seen.values())


def input_ids(args):
    return {id(arg.data if hasattr(arg, "requires_grad") else arg) for arg in args}


def measure_eager(inputs):
    args = arguments(inputs)
    loss = mlp_loss(*args)
    nodes = tape_nodes(loss._node)
    arrays = []
    for node in nodes:
        if isinstance(node, PrimitiveNode):
            arrays += [*node.primals, node.out]
    held = held_arrays(arrays, input_ids(args))
    held["nodes"] = len(nodes)
    loss.backward()
    return held, float(loss.numpy()), [arg.grad.numpy() for arg in args[2:]]


def measure_compiled(jitted, inputs):
    args = arguments(inputs)
    loss = jitted(*args)
    if not isinstance(loss.grad_fn, OutputNode):
        raise RuntimeError(f"the MLP loss did not run compiled: {jitted.stats()}\n"
                           f"{jitted.explain()}")
    call = loss.grad_fn.parents[0]
    assert isinstance(call, CompiledNode)
    held = held_arrays([*call.inputs, *call.residuals], input_ids(args))
    residuals = held_arrays(list(call.residuals), set())
    # The partitioner's own count (at this call's symbol values), from the variant's path;
    # private attributes, as the benchmark needs the figure and not just explain()'s text.
    path = jitted._variants[0].root
    held.update(
        path_residual_bytes=path.residual_bytes,
        residual_bytes_held=residuals["bytes_with_inputs"],
        residuals=[dict(shape=list(r.shape), dtype=str(r.dtype), bytes=r.nbytes)
                   for r in call.residuals],
    )
    loss.backward()
    return held, float(loss.numpy()), [arg.grad.numpy() for arg in args[2:]]


def run(dtype):
    inputs = mlp_inputs(dtype)
    eager, eager_loss, eager_grads = measure_eager(inputs)
    jitted = jit(mlp_loss, cache="memory")
    measure_compiled(jitted, inputs)  # the first call traces and compiles
    compiled, compiled_loss, compiled_grads = measure_compiled(jitted, inputs)
    tolerance = 1e-4 if np.dtype(dtype) == np.float32 else 1e-10
    agree = abs(compiled_loss - eager_loss) <= tolerance * abs(eager_loss) and all(
        np.allclose(got, want, rtol=tolerance, atol=tolerance)
        for got, want in zip(compiled_grads, eager_grads))
    return dict(
        dtype=str(np.dtype(dtype)),
        sizes=SIZES,
        eager=eager,
        compiled=compiled,
        results_agree=bool(agree),
        meets_goal=bool(
            compiled["bytes_without_inputs"] <= eager["bytes_without_inputs"]
            and compiled["bytes_with_inputs"] <= eager["bytes_with_inputs"]
        ),
        stats=jitted.stats(),
    )


def _mib(value):
    return f"{value / 2**20:9.2f} MiB"


def format_report(row):
    eager, compiled = row["eager"], row["compiled"]

    def ratio(key):
        return compiled[key] / eager[key]

    lines = [
        f"{'':28}{'without inputs':>16}{'with inputs':>16}{'arrays':>8}",
        f"{'eager tape (by id)':28}{_mib(eager['bytes_without_inputs']):>16}"
        f"{_mib(eager['bytes_with_inputs']):>16}{eager['arrays']:>8}",
        f"{'eager tape (by buffer)':28}{_mib(eager['buffer_bytes_without_inputs']):>16}"
        f"{_mib(eager['buffer_bytes_with_inputs']):>16}",
        f"{'compiled residuals':28}{_mib(compiled['bytes_without_inputs']):>16}"
        f"{_mib(compiled['bytes_with_inputs']):>16}{compiled['arrays']:>8}",
        "",
        f"Path.residual_bytes = {compiled['path_residual_bytes']:,} bytes; arrays the "
        f"CompiledNode holds as residuals = {compiled['residual_bytes_held']:,} bytes",
        "compiled residuals: " + ", ".join(
            f"{r['dtype']}{r['shape']}" for r in compiled["residuals"]),
        "largest arrays on the eager tape: " + ", ".join(
            f"{a['dtype']}{a['shape']}" for a in eager["largest"]),
        f"eager tape: {eager['nodes']} nodes; compiled vs eager loss and gradients agree: "
        f"{row['results_agree']}",
        f"ratio compiled/eager: {ratio('bytes_without_inputs'):.3f} without inputs, "
        f"{ratio('bytes_with_inputs'):.3f} with inputs; goal compiled <= eager: "
        f"{'ok' if row['meets_goal'] else 'MISS'}",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    options = parser.parse_args(argv)
    row = run(np.dtype(options.dtype))
    sizes = SIZES
    print(f"Backward-pass memory, MLP {sizes['batch']}×{sizes['inputs']}→{sizes['hidden']}→"
          f"{sizes['classes']} (relu, softmax cross-entropy), {row['dtype']}, gradients of "
          "w1, b1, w2, b2")
    print(format_report(row))
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    report = dict(
        benchmark="autograd_memory",
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        goal="compiled residual bytes <= eager tape bytes, with and without the inputs",
        machine=machine_facts(),
        **row,
    )
    RESULTS_PATH.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"Wrote {RESULTS_PATH}")
    return 0 if row["meets_goal"] and row["results_agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
