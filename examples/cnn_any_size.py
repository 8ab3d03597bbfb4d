"""A small all-convolutional network trained on images of many sizes (issue 14).

    python examples/cnn_any_size.py [--quick] [--steps N]

The data: synthetic 3-channel images of eight different sizes, from 17x29 to 32x32; the
label says whether the top half is brighter than the bottom half. ``tracejit.data
.BucketBatcher(buckets=None)`` groups the images by exact shape, so every batch holds
images of one size. The model is written with ``tracejit.nn``: conv 3x3 -> relu -> max
pool -> conv 3x3 stride 2 -> relu -> adaptive average pool to 1x1 -> linear, so any image
size gives the same classifier input.

The whole training step (forward, loss, gradients) is one ``jit`` function with dynamic
shapes: height and width are symbolic per size bucket, so the eight image sizes (all in
the bucket [17, 32]) share one compiled program. The example prints, per size, the
compiles so far, the median eager and compiled step times, and the loss falling.
"""

import argparse
import time

import numpy as np

import tracejit as tj
from tracejit import nn
from tracejit.data import BucketBatcher

SIZES = [(17, 29), (20, 24), (24, 20), (28, 28), (31, 23), (32, 32), (19, 17), (26, 30)]


def make_images(rng, count):
    samples = []
    for index in range(count):
        height, width = SIZES[index % len(SIZES)]
        image = rng.standard_normal((3, height, width)) * 0.5
        label = int(rng.random() < 0.5)
        half = height // 2
        if label:
            image[:, :half] += 0.8
        else:
            image[:, half:] += 0.8
        samples.append((image, np.int64(label)))
    return samples


def init(rng):
    return {"w1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b1": np.zeros(8),
            "w2": rng.standard_normal((16, 8, 3, 3)) * 0.15, "b2": np.zeros(16),
            "w3": rng.standard_normal((16, 2)) * 0.3, "b3": np.zeros(2)}


def model(params, images):
    out = nn.relu(nn.conv2d(images, params["w1"], params["b1"], padding=1))
    out = nn.max_pool2d(out, 2)
    out = nn.relu(nn.conv2d(out, params["w2"], params["b2"], stride=2, padding=1))
    features = nn.adaptive_avg_pool2d(out, 1).reshape(out.shape[0], -1)
    return nn.linear(features, params["w3"], params["b3"])


def loss(params, images, labels):
    return nn.cross_entropy(model(params, images), labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps (for CI)")
    parser.add_argument("--steps", type=int, default=None, help="training epochs")
    args = parser.parse_args()
    epochs = args.steps or (2 if args.quick else 8)
    rng = np.random.default_rng(0)
    samples = make_images(rng, 64 if args.quick else 256)
    batches = BucketBatcher(samples, batch_size=8, buckets=None, shuffle=True, seed=1)
    params = init(rng)
    eager_step = tj.value_and_grad(loss)
    step = tj.jit(tj.value_and_grad(loss), dynamic=True)
    learning_rate = 0.1
    times = {"eager": {}, "compiled": {}}
    print(f"{len(samples)} images of {len(SIZES)} sizes, batches of 8 by exact size")
    for epoch in range(epochs):
        losses = []
        for batch in batches:
            images, labels = batch.data
            size = images.shape[2:]
            start = time.perf_counter()
            value, gradients = step(params, images, labels)
            times["compiled"].setdefault(size, []).append(time.perf_counter() - start)
            if epoch == 0:  # the same step eagerly, for the comparison (not applied)
                start = time.perf_counter()
                eager_value, _ = eager_step(params, images, labels)
                times["eager"].setdefault(size, []).append(time.perf_counter() - start)
                assert abs(eager_value - value) < 1e-8 * max(1.0, abs(value))
            params = {name: params[name] - learning_rate * gradients[name] for name in params}
            losses.append(float(value))
        print(f"epoch {epoch + 1}: mean loss {np.mean(losses):.4f}, "
              f"compiles so far {step.stats()['compiles']}")
    print("per image size: median step time, eager vs compiled (the first compiled step of "
          "the bucket includes tracing and compiling)")
    for size in sorted(times["compiled"]):
        eager = np.median(times["eager"][size]) * 1e3
        compiled = np.median(times["compiled"][size][1:] or times["compiled"][size]) * 1e3
        print(f"  {size[0]:>2}x{size[1]:<2}: eager {eager:7.2f} ms, compiled {compiled:7.2f} ms")
    stats = step.stats()
    print(f"{len(times['compiled'])} image sizes, {stats['compiles']} compile(s), "
          f"{stats['compiled_calls']} compiled calls, eager calls {stats['eager_calls'] or 0}")


if __name__ == "__main__":
    main()
