"""Train a two-layer MLP eagerly with Tensors and autograd on a synthetic problem.

    python examples/mlp_eager.py [--steps N]

The data: points in 2-D labelled by which of three rotated half-planes they fall in.
The loss printed every few steps should fall well below its starting value (ln 3 ~ 1.1).
"""

import argparse

import numpy as np

from tracejit import nn, optim, tensor


def make_data(rng, count):
    points = rng.normal(size=(count, 2))
    angles = np.arctan2(points[:, 1], points[:, 0])
    labels = ((angles + np.pi) / (2 * np.pi / 3)).astype(np.int64) % 3
    return points, labels


def model(params, x):
    w1, b1, w2, b2 = params
    return nn.linear(nn.relu(nn.linear(x, w1, b1)), w2, b2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    points, labels = make_data(rng, 512)
    hidden = 64
    params = [
        tensor(rng.normal(scale=0.5, size=(2, hidden)), requires_grad=True),
        tensor(np.zeros(hidden), requires_grad=True),
        tensor(rng.normal(scale=0.5, size=(hidden, 3)), requires_grad=True),
        tensor(np.zeros(3), requires_grad=True),
    ]
    optimizer = optim.Adam(params, lr=0.01)
    first = None
    for step in range(args.steps + 1):
        optimizer.zero_grad()
        loss = nn.cross_entropy(model(params, points), labels)
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
        if step % max(args.steps // 10, 1) == 0:
            accuracy = (model(params, points).numpy().argmax(-1) == labels).mean()
            print(f"step {step:4d}  loss {loss.item():.4f}  accuracy {accuracy:.3f}")
    print(f"loss fell from {first:.3f} to {loss.item():.3f}")


if __name__ == "__main__":
    main()
