"""Adversarial real-model tests, round 22b: classic sequence and vision code and the
terminal branch of gym's CartPole, written in the idioms of public NumPy code and run
eagerly and through ``jit`` on copies of the same arguments and objects.

Modelled on: gym's ``classic_control/cartpole.py`` after termination (its
``self.steps_beyond_terminated``, None until the pole falls, then an int the step
increments); GRU cells with reset and update gates over time from "RNN from scratch"
blog code (a parameter dict, a list of hidden states read at ``hs[-1]``) and
bidirectional simple RNNs (a forward loop and a ``reversed(range(T))`` loop into
preallocated buffers, concatenated); image code padding by np.pad's statistic modes
(``'maximum'``, ``'minimum'``, ``'mean'``). Probed and found right, not kept as tests
(their idioms have tests of earlier rounds): Karpathy-style char-LSTM forward and
backward through time with dicts of gates and ``np.clip(d[k], -5, 5, out=d[k])``,
col2im by ``np.add.at`` with fancy index grids, convolution windows by ``as_strided``
and ``einsum``, max-pool forward/backward by a reshape mask and by ``argmax`` with
``np.unravel_index``, batch norm with running statistics switched between train and
test modes, dropout layers drawing their masks by ``np.random.rand`` (the global stream
left as eager leaves it), beam search over Python lists sorted by score and its
vectorized ``argsort`` form, a Bahdanau attention decoder loop, ``jit(value_and_grad)``
of an RNN loss against finite differences, and an nnfs-style Sequential train step with
Adam state keyed by ``layer.name + "_" + k`` and early stopping.

Findings, fixed (each test fails before its fix). Needlessly traced on every call: a
side exit whose other path reads an attribute the variant's entry does not
(CartPole's terminal branch reads ``self.steps_beyond_terminated``, an int) "needed a
different entry", so every call down that path was traced again and never compiled
(14 of 26 CartPole steps compiled, now 25). Such a path is now a variant of its own tried before the
variant it left (``runtime/misses._other_entry``), and a side exit first tries the
variants after its own (``_side_exit``), so calls going either way run compiled.
Needlessly eager: np.pad's ``'maximum'``, ``'minimum'`` and ``'mean'`` modes were
unsupported (``tracer/pad_modes.pad_by_statistic``; ``stat_length`` still is).

Needlessly eager, too: an optimizer whose state dict is keyed by a tuple
(``self.m[(layer.name, k)] = ...``) ran eagerly on every call (outside-dict item writes
and the scan for implicit inputs took str and int keys only); a tuple of them is a key
now (``attribute_writes.plain_key``). ``id(param)`` keys are in docs/sharp_bits.md.

Each call compares results, dtypes, types and the arguments and objects afterwards with
eager NumPy, and an exception eager raises must be raised too.
"""

import math

import numpy as np
from real_model_checks import assert_same, no_internal_errors, rng_for, run_calls

import tracejit as tj


# --- gym's CartPole after termination: an attribute None, then an int ---------------------
class CartPole:
    """gym's step (Euler) with its termination bookkeeping; ``reset`` as gym's."""

    def __init__(self):
        self.gravity, self.masscart, self.masspole = 9.8, 1.0, 0.1
        self.total_mass = self.masspole + self.masscart
        self.length, self.force_mag, self.tau = 0.5, 10.0, 0.02
        self.polemass_length = self.masspole * self.length
        self.theta_threshold_radians, self.x_threshold = 12 * 2 * math.pi / 360, 2.4
        self.reset()

    def reset(self):
        self.state = (0.01, 0.02, -0.03, 0.04)
        self.steps_beyond_terminated = None

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + self.polemass_length * theta_dot ** 2 * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta ** 2 / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        self.state = (x, x_dot, theta, theta_dot)
        terminated = bool(x < -self.x_threshold or x > self.x_threshold
                          or theta < -self.theta_threshold_radians
                          or theta > self.theta_threshold_radians)
        if not terminated:
            reward = 1.0
        elif self.steps_beyond_terminated is None:
            self.steps_beyond_terminated = 0  # the pole just fell
            reward = 1.0
        else:
            self.steps_beyond_terminated += 1  # gym warns here: stepping past the end
            reward = 0.0
        return np.array(self.state, dtype=np.float32), reward, terminated


def test_cartpole_steps_past_termination_compile():
    """Before the fix 14 of the 26 calls ran compiled (now 25): every step past
    termination was traced (its branch reads ``steps_beyond_terminated``, an int the first variant's
    entry never read). After a reset the first variant's path runs compiled again."""
    eager, compiled = CartPole(), CartPole()
    f = tj.jit(compiled.step, cache="memory")
    for call in range(26):
        if call == 20:
            eager.reset()
            compiled.reset()
        assert_same(f(1), eager.step(1), rtol=1e-6, atol=1e-7)
        assert compiled.state == eager.state
        assert compiled.steps_beyond_terminated == eager.steps_beyond_terminated
        assert type(compiled.steps_beyond_terminated) is type(eager.steps_beyond_terminated)
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 23, f.explain()


# --- GRU and bidirectional RNNs from "RNN from scratch" posts --------------------------------
def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def gru_forward(x, h0, params):
    hs = [h0]
    for t in range(x.shape[0]):
        h = hs[-1]
        z = _sigmoid(x[t] @ params["Wz"] + h @ params["Uz"] + params["bz"])
        r = _sigmoid(x[t] @ params["Wr"] + h @ params["Ur"] + params["br"])
        candidate = np.tanh(x[t] @ params["Wh"] + (r * h) @ params["Uh"] + params["bh"])
        hs.append((1 - z) * h + z * candidate)
    return np.stack(hs[1:]), hs[-1]


def birnn(x, wf, uf, wb, ub):
    steps, hidden = x.shape[0], wf.shape[1]
    forward, backward = np.zeros((steps, hidden)), np.zeros((steps, hidden))
    h = np.zeros(hidden)
    for t in range(steps):
        h = np.tanh(x[t] @ wf + h @ uf)
        forward[t] = h
    h = np.zeros(hidden)
    for t in reversed(range(steps)):
        h = np.tanh(x[t] @ wb + h @ ub)
        backward[t] = h
    return np.concatenate([forward, backward], axis=1)


def test_gru_and_bidirectional_rnn_over_lengths():
    rng = rng_for(2201)
    params = {}
    for gate in "zrh":
        params["W" + gate] = rng.standard_normal((4, 5)) * 0.3
        params["U" + gate] = rng.standard_normal((5, 5)) * 0.3
        params["b" + gate] = np.zeros(5)
    f = run_calls(gru_forward, [(rng.standard_normal((steps, 4)), np.zeros(5), params)
                                for steps in (1, 7, 0)], repeats=1)
    no_internal_errors(f)
    weights = [rng.standard_normal(shape) * 0.4 for shape in [(3, 4), (4, 4)] * 2]
    inputs = rng.standard_normal((11, 6))[:, ::2]  # non-contiguous rows
    f = run_calls(birnn, [(inputs[:steps], *weights) for steps in (1, 2, 11)], repeats=1)
    no_internal_errors(f)


# --- np.pad's statistic modes -----------------------------------------------------------------
def pad_statistics(x):
    return (np.pad(x, 1, mode="maximum"), np.pad(x, (1, 2), mode="mean"),
            np.pad(x, ((0, 2), (3, 0)), mode="minimum"))


def test_pad_statistic_modes_compile():
    """They ran eagerly (unsupported). Corners take the later axis' statistic over the
    earlier axis' pads, a mean rounds into an integer dtype, NaN and inf propagate."""
    rng = rng_for(2202)
    f = run_calls(pad_statistics, [(rng.standard_normal((3, 4)),), (rng.standard_normal((1, 1)),),
                                   (np.array([[1.0, np.nan], [np.inf, 4.0]]),)], repeats=1)
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] + f.stats()["traced_calls"] == 3, f.explain()
    f = run_calls(pad_statistics, [(rng.integers(-9, 9, (4, 3)),),
                                   (rng.standard_normal((7, 5)).astype(np.float32).T,),
                                   (np.zeros((0, 3)),)], rtol=1e-6, atol=1e-6, repeats=1)
    no_internal_errors(f)


# --- an optimizer's state keyed by tuples ---------------------------------------------------
class TupleKeyedMomentum:
    def __init__(self):
        self.m = {}

    def step(self, params, grads):
        for name, param in params.items():
            key = ("dense", name)
            if key not in self.m:
                self.m[key] = np.zeros_like(param)
            self.m[key] = 0.9 * self.m[key] + 0.1 * grads[name]
            param -= 0.01 * self.m[key]


def test_optimizer_state_keyed_by_tuples_compiles():
    """Every call ran eagerly: an outside dict's item written at a tuple key was outside
    state. Tuples of str and int keys are paths now (memory cache only: the disk
    cache's keys take str and int)."""
    eager, compiled = TupleKeyedMomentum(), TupleKeyedMomentum()
    f = tj.jit(compiled.step, cache="memory")
    rng = rng_for(2203)
    params_eager = {"W": rng.standard_normal((2, 3)), "b": np.zeros(3)}
    params_compiled = {key: value.copy() for key, value in params_eager.items()}
    for _ in range(3):
        grads = {key: rng.standard_normal(value.shape) for key, value in params_eager.items()}
        eager.step(params_eager, grads)
        f(params_compiled, grads)
        assert_same(params_compiled, params_eager)
        assert_same(compiled.m, eager.m)
    assert f.stats()["compiled_calls"] > 0, f.explain()
