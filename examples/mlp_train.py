"""Train an MLP classifier with compiled training steps: forward, loss, backward, update.

    python examples/mlp_train.py [--quick] [--steps N] [--batch N] [--hidden N]

The data: synthetic "images" (784 features by default) scattered around ten class
prototypes. The model: 784 -> 256 -> 10 with ReLU, softmax cross-entropy, plain SGD.

Each training step is a function from parameters and a batch to ``(loss, new
parameters)``. Four variants train side by side from the same initial weights on the
same batches, so their losses must agree at every step:

* ``eager NumPy``: ``sgd_step_by_hand``, the forward pass, the loss, a backward pass
  worked out by hand and the update, in plain NumPy: the baseline;
* ``compiled``: ``jit(sgd_step_by_hand)``, that same function traced once and run as
  one program of fused native kernels;
* ``jit(value_and_grad)``: ``jit(sgd_step_autograd)``, the gradients from
  ``value_and_grad`` instead of by hand; the backward pass is derived on the trace, so
  forward, backward and update are again one compiled program;
* ``jit loss, Tensors in``: the PyTorch way (``sgd_step_tensors``): leaf Tensors that
  require grad go into the compiled ``mean_cross_entropy``; the forward runs compiled,
  ``loss.backward()`` runs its compiled backward program, ``optim.SGD`` updates eagerly.

The stats printed for each compiled variant say how many steps ran natively, and
whether any ran eagerly and why.
"""

import argparse
import re
import time

import numpy as np

from tracejit import Tensor, jit, nn, optim, tensor, value_and_grad
from tracejit.runtime.tensor import unwrap


def make_data(rng, prototypes, count):
    """Points scattered around the class ``prototypes``, scaled to unit variance per
    feature; float32 like real inputs. The noise grows with the square root of the
    feature count, as the distance between prototypes does, so the classes overlap about
    as much at any size."""
    classes, features = prototypes.shape
    noise = 0.2 * np.sqrt(features)
    labels = rng.integers(0, classes, size=count)
    points = prototypes[labels] + noise * rng.normal(size=(count, features))
    return (points / np.sqrt(1 + noise**2)).astype(np.float32), labels


def init_params(rng, features, hidden, classes):
    """He-initialized weights, (in, out) like ``nn.linear``."""
    return (
        (rng.normal(size=(features, hidden)) * np.sqrt(2.0 / features)).astype(np.float32),
        np.zeros(hidden, dtype=np.float32),
        (rng.normal(size=(hidden, classes)) * np.sqrt(2.0 / hidden)).astype(np.float32),
        np.zeros(classes, dtype=np.float32),
    )


def mlp(params, x):
    w1, b1, w2, b2 = params
    return nn.linear(nn.relu(nn.linear(x, w1, b1)), w2, b2)


def sgd_step_by_hand(params, x, labels, lr):
    """One SGD step on a batch; returns ``(loss, new_params)``. Plain NumPy throughout."""
    w1, b1, w2, b2 = params
    batch, classes = x.shape[0], w2.shape[1]

    # forward
    pre_activation = x @ w1 + b1
    hidden = nn.relu(pre_activation)
    logits = hidden @ w2 + b2
    log_probs = nn.log_softmax(logits)
    targets = labels[:, None] == np.arange(classes)  # one-hot, as booleans
    loss = -np.sum(np.where(targets, log_probs, 0)) / batch

    # backward: d(mean cross-entropy)/d(logits) is (softmax - one-hot) / batch
    grad_logits = (np.exp(log_probs) - targets) / batch
    grad_w2 = hidden.T @ grad_logits
    grad_b2 = np.sum(grad_logits, axis=0)
    grad_hidden = grad_logits @ w2.T
    grad_pre = np.where(pre_activation > 0, grad_hidden, 0)
    grad_w1 = x.T @ grad_pre
    grad_b1 = np.sum(grad_pre, axis=0)

    # update
    new_params = (w1 - lr * grad_w1, b1 - lr * grad_b1, w2 - lr * grad_w2, b2 - lr * grad_b2)
    return loss, new_params


def mean_cross_entropy(params, x, labels):
    return nn.cross_entropy(mlp(params, x), labels)


def sgd_step_autograd(params, x, labels, lr):
    """The same step with the gradients from autograd instead of by hand."""
    loss, grads = value_and_grad(mean_cross_entropy)(params, x, labels)
    return loss, tuple(param - lr * grad for param, grad in zip(params, grads))


compiled_loss = jit(mean_cross_entropy)


def sgd_step_tensors(params, x, labels, lr):
    """The PyTorch way: the parameters are leaf Tensors that require grad (the first step
    makes them), the loss is a jit function, ``loss.backward()`` fills ``.grad`` and
    ``optim.SGD`` updates the Tensors in place."""
    params = [p if isinstance(p, Tensor) else tensor(p, requires_grad=True) for p in params]
    optimizer = optim.SGD(params, lr=lr)  # plain SGD: no state carried between steps
    optimizer.zero_grad()
    loss = compiled_loss(params, x, labels)
    loss.backward()
    optimizer.step()
    return loss.item(), params


VARIANTS = {  # name: (step function, the jit function whose stats say what ran compiled)
    "eager NumPy": (sgd_step_by_hand, None),
    "compiled": (jit(sgd_step_by_hand),) * 2,
    "jit(value_and_grad)": (jit(sgd_step_autograd),) * 2,
    "jit loss, Tensors in": (sgd_step_tensors, compiled_loss),
}


@jit
def predict(params, x):
    return np.argmax(mlp(params, x), axis=-1)


def train_side_by_side(variants, params, points, labels, batch_rows, lr, report_every):
    """Run every variant's step on each batch (``points[rows]`` for ``rows`` in
    ``batch_rows``) in turn, rotating who goes first so a busy machine slows them alike.
    Returns ``{name: (params, losses, step seconds)}``."""
    names = list(variants)
    state = {name: params for name in names}
    losses = {name: [] for name in names}
    seconds = {name: [] for name in names}
    print("  step  loss: " + " | ".join(names))
    for index, rows in enumerate(batch_rows):
        x, y = points[rows], labels[rows]
        for name in names[index % len(names):] + names[:index % len(names)]:
            start = time.perf_counter()
            step = variants[name][0]
            loss, state[name] = step(state[name], x, y, lr)
            seconds[name].append(time.perf_counter() - start)
            losses[name].append(float(loss))
        if index % report_every == 0 or index == len(batch_rows) - 1:
            print(f"  {index:4d}        " + " | ".join(f"{losses[name][-1]:.4f}"
                                                      for name in names))
    return {name: (state[name], np.array(losses[name]), np.array(seconds[name]))
            for name in names}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a few seconds)")
    parser.add_argument("--steps", type=int, help="training steps [300; 60 with --quick]")
    parser.add_argument("--batch", type=int, help="batch size [512; 64 with --quick]")
    parser.add_argument("--hidden", type=int, help="hidden units [256; 32 with --quick]")
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    features = 64 if args.quick else 784
    steps = args.steps or (60 if args.quick else 300)
    batch = args.batch or (64 if args.quick else 512)
    hidden = args.hidden or (32 if args.quick else 256)
    classes = 10

    rng = np.random.default_rng(0)
    prototypes = rng.normal(size=(classes, features))
    train_x, train_labels = make_data(rng, prototypes, 8 * batch)
    test_x, test_labels = make_data(rng, prototypes, 2 * batch)
    batch_rows = [rng.choice(len(train_x), size=batch, replace=False) for _ in range(steps)]

    print(f"MLP {features} -> {hidden} -> {classes}, batch {batch}, {steps} SGD steps "
          f"(lr {args.lr}), float32")
    params = init_params(rng, features, hidden, classes)
    results = train_side_by_side(VARIANTS, params, train_x, train_labels, batch_rows, args.lr,
                                 report_every=max(steps // 10, 1))

    reference_params, reference_losses, reference_seconds = results["eager NumPy"]
    warmup = min(3, steps - 1)  # the first compiled step traces and compiles
    eager_ms = 1e3 * float(np.median(reference_seconds[warmup:]))
    print(f"per step, median after {warmup} warmup steps: eager NumPy {eager_ms:.3f} ms")
    agree = True
    for name, (_, function) in VARIANTS.items():
        if function is None:
            continue
        final_params, losses, seconds = results[name]
        step_ms = 1e3 * float(np.median(seconds[warmup:]))
        loss_gap = float(np.max(np.abs(losses - reference_losses)))
        weight_gap = max(float(np.max(np.abs(unwrap(mine) - theirs)))
                         for mine, theirs in zip(final_params, reference_params))
        agree = agree and loss_gap < 1e-3 and weight_gap < 1e-3
        stats = function.stats()
        print(f"  {name}: {step_ms:.3f} ms ({eager_ms / step_ms:.2f}x); first step "
              f"{1e3 * seconds[0]:.0f} ms; vs eager max |loss diff| {loss_gap:.1e}, "
              f"max |weight diff| {weight_gap:.1e}")
        print(f"    {function.__name__}.stats(): {stats['compiled_calls']} compiled calls, "
              f"{stats['traced_calls']} traced, eager {stats['eager_calls'] or 'none'}, "
              f"{stats['compiles']} compile(s) in {stats['compile_seconds']:.2f} s, "
              f"{stats['disk_hits']} from the disk cache")
        backward = re.search(r"backward: (\d+) kernel", function.explain())
        if backward:
            print(f"    its backward pass: a compiled program of {backward.group(1)} kernels")
    print(f"compiled and eager losses {'agree' if agree else 'DISAGREE'} at every step")
    final_params, losses, _ = results["compiled"]
    print(f"loss fell from {losses[0]:.3f} to {losses[-1]:.3f}")
    train_accuracy = float(np.mean(predict(final_params, train_x) == train_labels))
    test_accuracy = float(np.mean(predict(final_params, test_x) == test_labels))
    print(f"accuracy of the compiled run: train {train_accuracy:.3f}, held-out "
          f"{test_accuracy:.3f}")
    if not agree:
        raise SystemExit("compiled and eager training disagree")


if __name__ == "__main__":
    main()
