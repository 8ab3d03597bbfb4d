"""The dynamic-graph example tracejit grew from: a data-dependent ``if`` whose gradient
follows whichever branch the data took.

    python examples/seed_dynamic_graph.py
"""

import numpy as np

from tracejit import tensor


def dynamic_graph_example(x):
    if x.sum() > 0:
        y = x * 2
    else:
        y = x - 2
    return y


def main():
    for values in ([1.0, -1.0, 2.0], [-3.0, -2.0, -1.0]):
        x = tensor(values, requires_grad=True)
        out = dynamic_graph_example(x)
        out.backward(np.ones_like(out))
        branch = "x * 2" if float(np.sum(values)) > 0 else "x - 2"
        print(f"x = {x.numpy()}  took {branch:6}  out = {out}  x.grad = {x.grad}")


if __name__ == "__main__":
    main()
