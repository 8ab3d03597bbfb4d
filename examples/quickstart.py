"""tracejit in one minute: compile, guard, fall back, compile both branches, speed, cache.

    python examples/quickstart.py [--quick] [--size N]
"""

import argparse

import numpy as np
from reporting import median_ms, print_cache_list

from tracejit import jit, nn


@jit
def dynamic_graph_example(x):
    if x.sum() > 0:  # a data-dependent branch: a guard in the compiled code
        y = x * 2
    else:
        y = x - 2
    return y


@jit
def block(x, w, b):
    """A layer-norm / gelu / softmax block: fused into a handful of native kernels."""
    h = nn.gelu(x * w + b)
    return nn.softmax(nn.layer_norm(h))


def eager_block(x, w, b):
    return nn.softmax(nn.layer_norm(nn.gelu(x * w + b)))


def call_and_say_how(function, x):
    """``f(x) = result   [how it ran]``, read from the function's stats."""
    before = function.stats()
    result = function(x)
    after = function.stats()
    eager = sum(after["eager_calls"].values()) - sum(before["eager_calls"].values())
    if after["disk_hits"] > before["disk_hits"]:
        how = "compiled code loaded from the disk cache"
    elif after["traced_calls"] > before["traced_calls"]:
        how = "traced and compiled; the result comes from the trace"
    elif eager:
        reasons = set(after["eager_calls"]) - set(before["eager_calls"]) or set(
            reason for reason, count in after["eager_calls"].items()
            if count > before["eager_calls"].get(reason, 0))
        how = f"eager NumPy ({', '.join(sorted(reasons))})"
    else:
        how = "compiled code"
    print(f"   f({x}) = {result}   [{how}]")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small block (for CI)")
    parser.add_argument("--size", type=int, help="rows and columns of the block [2048; 256 "
                        "with --quick]")
    args = parser.parse_args()

    print("1. The seed example: its first call traces and compiles it (or loads it from disk):")
    call_and_say_how(dynamic_graph_example, np.array([1.0, -1.0, 2.0]))
    if dynamic_graph_example.stats()["disk_hits"]:
        print("2. A negative input takes the other branch of `x.sum() > 0`. The trace tree loaded\n"
              "   from disk holds both branches, so it runs compiled (after `tracejit cache\n"
              "   clear`, a side exit would run it eagerly first, then compile that branch):")
    else:
        print("2. A negative input fails the guard `x.sum() > 0`: a side exit runs it eagerly,\n"
              "   with the right answer; after hot_exit=2 side exits that branch is compiled:")
    for _ in range(3):
        call_and_say_how(dynamic_graph_example, np.array([-3.0, -2.0, -1.0]))
    print("3. Both branches now run compiled:")
    for values in ([4.0, 5.0, 6.0], [-7.0, -8.0, -9.0]):
        call_and_say_how(dynamic_graph_example, np.array(values))
    stats = dynamic_graph_example.stats()
    print(f"   stats: {stats['compiled_calls']} compiled calls, eager {stats['eager_calls']}, "
          f"{stats['paths']} compiled paths")

    rng = np.random.default_rng(0)
    n = args.size or (256 if args.quick else 2048)
    x = rng.normal(size=(n, n)).astype(np.float32)
    w = rng.normal(size=n).astype(np.float32)
    b = rng.normal(size=n).astype(np.float32)
    block(x, w, b)  # the first call traces and compiles; its result comes from the trace
    compiled = block(x, w, b)  # native code
    reference = eager_block(x, w, b)
    error = float(np.max(np.abs(compiled - reference)))
    eager_ms, compiled_ms = median_ms([eager_block, block], x, w, b, repeat=20)
    print(f"4. gelu -> layer_norm -> softmax on {n}x{n} float32: NumPy {eager_ms:.2f} ms, "
          f"tracejit {compiled_ms:.2f} ms ({eager_ms / compiled_ms:.1f}x), max |diff| "
          f"{error:.1e}")
    print("   variable sizes reuse the compiled code of their bucket:")
    for rows in (n - n // 20, n - n // 7):
        block(x[:rows], w, b)
    stats = block.stats()
    print(f"   {stats['variants']} variant(s) for {stats['calls']} calls ({stats['compiles']} "
          f"compiled in this run, {stats['disk_hits']} loaded from the disk cache)")

    print("5. The on-disk cache (a second run starts from it, without tracing or LLVM):")
    print_cache_list("dynamic_graph_example", "block", indent="")


if __name__ == "__main__":
    main()
