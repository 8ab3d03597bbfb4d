"""A/B in one process: float64 math compiled with NumPy's loops on chunks
(TRACEJIT_NUMPY_MATH=1, the default) against our own math (=0), and eager NumPy, on
1024 x 1024 float64. Variants interleaved, best of `REPEAT` per round, CPU time of one
thread (TRACEJIT_NUM_THREADS=1 unless set). Usage:

    TRACEJIT_NUM_THREADS=1 .venv/bin/python docs/experiments/numpy_exact_math/bench_lowering.py
"""

import os
import time

import numpy as np

os.environ.setdefault("TRACEJIT_NUM_THREADS", "1")
import tracejit as tj  # noqa: E402

REPEAT, ROUNDS = 15, 3


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def decided(fn):
    """``fn``'s value and a mask on it: a decision reads the math (``decision_math``)."""
    def both(x):
        y = fn(x)
        return y, y > 0.5
    return both


CASES = {
    "2*exp(x)+1": lambda x: 2 * np.exp(x) + 1,
    "exp(x)": np.exp,
    "log(|x|+1)": lambda x: np.log(np.abs(x) + 1),
    "tanh(x)": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "softmax rows": softmax,
}
CASES.update({name + " >": decided(fn) for name, fn in list(CASES.items())})


def best(fn, x):
    times = []
    for _ in range(REPEAT):
        start = time.process_time()
        fn(x)
        times.append(time.process_time() - start)
    return min(times)


def main():
    x = np.random.default_rng(0).standard_normal((1024, 1024)) * 3
    for name, fn in CASES.items():
        compiled = {}
        for setting in ("1", "0"):
            os.environ["TRACEJIT_NUMPY_MATH"] = setting
            compiled[setting] = tj.jit(fn, cache="memory")
            compiled[setting](x)
            compiled[setting](x)
        rows = {"numpy loops": [], "own math": [], "eager": []}
        for _ in range(ROUNDS):
            rows["numpy loops"].append(best(compiled["1"], x))
            rows["own math"].append(best(compiled["0"], x))
            rows["eager"].append(best(fn, x))
        got, want = compiled["1"](x), fn(x)
        got, want = (got[0], want[0]) if isinstance(got, tuple) else (got, want)
        bits = np.array_equal(got, want)
        text = ", ".join(f"{k} " + "/".join(f"{t * 1e3:.2f}" for t in v)
                         for k, v in rows.items())
        print(f"{name:16s} {text} ms; numpy-loops bit-equal to eager: {bits}", flush=True)
    os.environ.pop("TRACEJIT_NUMPY_MATH")


if __name__ == "__main__":
    print("load", os.getloadavg())
    main()
    print("load", os.getloadavg())
