"""Adversarial real-model tests, round 22a: public NumPy model code rounds 1-21 did not
read, written in its idioms and run eagerly and through ``jit`` on copies of the same
arguments.

Sources read this round (rewritten, not pasted): johanwind's minimal RWKV in NumPy (after
BlinkDL's "RWKV in 150 lines": ``time_mixing`` / ``channel_mixing`` returning their new state
as a tuple, written back by ``dx, state[i][:3] = time_mixing(x_, *state[i][:3], ...)``,
parameters gathered by ``[model[key] for key in model.keys() if key.startswith(prefix)]``);
Philip Mocz's "Create your own ..." simulations and their many forks: Lattice Boltzmann (D2Q9
drift by ``np.roll`` over ``zip(range(NL), cxs, cys)``, the cylinder's reflected populations
``bndryF = F[cylinder, :]`` reordered by ``bndryF[:, [0, 5, 6, 7, 8, 1, 2, 3, 4]]`` and
written back by ``F[cylinder, :] = bndryF``, vorticity set to NaN inside the cylinder),
n-body (``inv_r3[inv_r3 > 0] = inv_r3[inv_r3 > 0] ** (-1.5)``, the energies' ``inv_r[inv_r
> 0] = 1.0 / inv_r[inv_r > 0]`` over ``x.T - x``), SPH and finite-volume Euler; gym's
classic-control CartPole (its state a tuple of Python floats the step rebinds) and
Pendulum; Mamba's selective scan in NumPy (mamba.np style: ``np.einsum`` discretization, a
scan loop appending ``y``, depthwise causal conv by padded slices, ``jit(value_and_grad)``
over the parameter dict); flash attention's online softmax over key blocks, causal linear
attention by ``np.cumsum`` of outer products, top-k mixture-of-experts gating, Gray-Scott
reaction-diffusion over views of one array, boids, Kuramoto, FrozenLake value iteration over
``env.P``, Loeber's Gaussian naive Bayes, a checkerboard Ising sweep, NT-Xent, triplet loss
with hard mining, a VQ-VAE quantizer with codebook counts.

Findings, each fixed with its test here (each fails before its fix). A crash where NumPy
runs: ``x[mask].max(initial=...)`` raised a TypeError out of the jitted call (the
selection's methods took no ``initial``); it compiles now, with NumPy's cast of
``initial``. Needless eager runs: a list or tuple of traced arrays assigned into a slice
(RWKV's ``state[i][:3] = (x, num, den)``) was converted to a NumPy array, so every call
ran eagerly; it is now their stack (``tracer/indexing._sequence_value``; copied item by
item where an item reads the target, as NumPy does). A boolean-mask selection indexed over
its trailing dims (``F[cylinder, :][:, perm]``) and a selection written back through
``x[mask, :]`` (a mask followed by full slices) ran eagerly: the first is the same index
of the dense values (``tracer/masked_selection._trailing_index``), the second a ``where``
as ``x[mask]`` is (``tracer/indexing._placed_mask``). Guard-margin exits on every call: a
body's distance to itself is exactly 0 on both sides, but ``dx ** 2`` and ``np.sqrt`` of it
carried the rounding's underflow floor, and between computed positions ``x.T - x`` carried
their bounds on the diagonal (pmocz's n-body loop never ran compiled); now ``0 ** p``, the
square root of an operand with no error, a sum of exact zeros and one element minus itself
(``tracer/element_sources.py``) are exact. A tuple of numbers an attribute keeps and the
calls rebind (CartPole's ``self.state``) was a variant per call, then eager; its numbers
are run-time inputs now (``frontend._number_tuple_state``).

Not fixed (reported): eager ``tracejit.value_and_grad`` (without ``jit``) of a loss over
the RWKV step fails with a TensorError at ``state[i][:3] = (...)`` (a Tensor written into a
view of a buffer made in the function); ``jit(value_and_grad)`` of it compiles and matches
finite differences. After CartPole terminates, ``self.steps_beyond_terminated`` going from
None to an int makes every later call a new trace (never compiled; correct). Mocz's drift,
``F[:, :, i] = np.roll(F[:, :, i], cx, axis=1)`` then the same for ``cy`` (18 writes into
slices of one array), takes ~7 s to compile on a loaded machine (one write per direction:
under 2 s). ``np.unique`` (a decision tree's thresholds) runs eagerly. All-NaN boids (every
bird at one place: ``0 / 0``) take guard-margin exits, as NaN bounds should.

Each call compares results, dtypes, types and the arguments afterwards with eager NumPy,
and an exception eager raises must be raised too.
"""

import math

import numpy as np
import pytest
from real_model_checks import all_compiled, assert_same, no_internal_errors, run_calls

import tracejit as tj

F64 = dict(rtol=1e-9, atol=1e-9)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def layer_norm(x, w, b):
    return (x - np.mean(x)) / np.std(x) * w + b


# --- RWKV: the recurrent state written back from returned tuples ---------------------------
def time_mixing(x, last_x, last_num, last_den, decay, bonus, mix_k, mix_v, mix_r, Wk, Wv, Wr,
                Wout):
    k = Wk @ (x * mix_k + last_x * (1 - mix_k))
    v = Wv @ (x * mix_v + last_x * (1 - mix_v))
    r = Wr @ (x * mix_r + last_x * (1 - mix_r))
    wkv = (last_num + np.exp(bonus + k) * v) / (last_den + np.exp(bonus + k))
    rwkv = sigmoid(r) * wkv
    num = np.exp(-np.exp(decay)) * last_num + np.exp(k) * v
    den = np.exp(-np.exp(decay)) * last_den + np.exp(k)
    return Wout @ rwkv, (x, num, den)


def channel_mixing(x, last_x, mix_k, mix_r, Wk, Wr, Wv):
    k = Wk @ (x * mix_k + last_x * (1 - mix_k))
    r = Wr @ (x * mix_r + last_x * (1 - mix_r))
    return sigmoid(r) * (Wv @ np.maximum(k, 0) ** 2), x


def rwkv(model, token, state):
    def params(prefix):
        return [model[key] for key in model.keys() if key.startswith(prefix)]

    x = layer_norm(params("emb")[0][token], *params("blocks.0.ln0"))
    for i in range(state.shape[0]):
        x_ = layer_norm(x, *params(f"blocks.{i}.ln1"))
        dx, state[i][:3] = time_mixing(x_, *state[i][:3], *params(f"blocks.{i}.att"))
        x = x + dx
        x_ = layer_norm(x, *params(f"blocks.{i}.ln2"))
        dx, state[i][3] = channel_mixing(x_, state[i][3], *params(f"blocks.{i}.ffn"))
        x = x + dx
    x = params("head")[0] @ layer_norm(x, *params("ln_out"))
    e_x = np.exp(x - np.max(x))
    return e_x / e_x.sum(), state


def _rwkv_model(layers=2, V=5, D=3, F=4, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.5):
        return rng.standard_normal(shape) * scale

    model = {"emb.weight": normal(V, D, scale=1.0),
             "blocks.0.ln0.weight": 1 + normal(D, scale=0.1),
             "blocks.0.ln0.bias": normal(D, scale=0.1)}
    for i in range(layers):
        p = f"blocks.{i}."
        for ln in ("ln1", "ln2"):
            model[p + ln + ".weight"] = 1 + normal(D, scale=0.1)
            model[p + ln + ".bias"] = normal(D, scale=0.1)
        model[p + "att.time_decay"], model[p + "att.time_first"] = normal(D), normal(D)
        for name in ("k", "v", "r"):
            model[p + f"att.time_mix_{name}"] = rng.random(D)
        for name in ("key", "value", "receptance", "output"):
            model[p + f"att.{name}.weight"] = normal(D, D)
        model[p + "ffn.time_mix_k"], model[p + "ffn.time_mix_r"] = rng.random(D), rng.random(D)
        model[p + "ffn.key.weight"] = normal(F, D)
        model[p + "ffn.receptance.weight"] = normal(D, D)
        model[p + "ffn.value.weight"] = normal(D, F)
    model["ln_out.weight"], model["ln_out.bias"] = np.ones(D), np.zeros(D)
    model["head.weight"] = normal(V, D, scale=1.0)
    return {key: value.astype(dtype) for key, value in model.items()}


def test_rwkv_state_written_back_from_returned_tuples_compiles():
    """Before the fix every call ran eagerly ('a traced array was converted to a NumPy
    array' at ``state[i][:3] = time_mixing(...)``). The state is the caller's array, written
    in place; a token as a Python int, then another (the compiled call reads the state
    the first one wrote)."""
    model = _rwkv_model(layers=1)
    state = np.zeros((1, 4, 3))
    f = run_calls(rwkv, [(model, 3, state), (model, 1, state + 0.1)], **F64)
    no_internal_errors(f)
    assert all_compiled(f, 4), f.explain()


def tuple_into_slice(state, a, b):
    state[1:3] = (a * 2, b)
    state[0, :2] = [a.sum(), b.max()]
    return state


def tuple_into_int_rows(state, a, b):
    state[:2] = (a, b)
    return state


def test_a_tuple_of_traced_arrays_assigned_into_a_slice():
    """Rows, scalars into a row, float32 arrays into a float64 state (a cast, as NumPy's),
    a broadcast row, NumPy's errors for a count or a length that does not fit; float values
    into an int array convert with ``int()`` in NumPy (NaN raises): eager, not a cast."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(4), rng.standard_normal(4)
    f = run_calls(tuple_into_slice, [
        (np.zeros((3, 4)), a, b), (np.ones((3, 4)), a[::-1], b), (np.zeros((3, 4)), a, b[:1]),
    ], **F64)
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 3, f.explain()
    g = run_calls(tuple_into_slice, [(np.zeros((3, 4)), np.float32(a), np.float32(b))],
                  rtol=1e-6, atol=1e-6)  # a float32 sum, in another order than NumPy's
    assert all_compiled(g, 2), g.explain()
    run_calls(tuple_into_slice, [(np.zeros((3, 4)), a, b[:3]), (np.zeros((2, 4)), a, b)])
    nan = np.array([np.nan, 1.0])
    h = run_calls(tuple_into_int_rows, [(np.zeros((2, 2), int), np.ones(2), np.ones(2) / 3),
                                        (np.zeros((2, 2), int), nan, nan)])
    no_internal_errors(h)


# --- Lattice Boltzmann: a boolean-mask selection reordered and written back ------------------
CXS = np.array([0, 0, 1, 1, 1, 0, -1, -1, -1])
CYS = np.array([0, 1, 1, 0, -1, -1, -1, 0, 1])
WEIGHTS = np.array([4 / 9, 1 / 9, 1 / 36, 1 / 9, 1 / 36, 1 / 9, 1 / 36, 1 / 9, 1 / 36])


def lbm_step(F, cylinder, tau):
    for i, cx, cy in zip(range(9), CXS, CYS):  # (Mocz writes each roll back: 18 writes,
        # several seconds of compile; one write per direction here)
        F[:, :, i] = np.roll(np.roll(F[:, :, i], cx, axis=1), cy, axis=0)
    bndryF = F[cylinder, :]
    bndryF = bndryF[:, [0, 5, 6, 7, 8, 1, 2, 3, 4]]
    rho = np.sum(F, 2)
    ux = np.sum(F * CXS, 2) / rho
    uy = np.sum(F * CYS, 2) / rho
    # (Mocz's equilibrium is a loop over the nine directions writing Feq[:, :, i]; the
    # same formula broadcast over them keeps this test cheap to compile)
    cu = CXS * ux[..., None] + CYS * uy[..., None]
    Feq = rho[..., None] * WEIGHTS * (1 + 3 * cu + 9 * cu ** 2 / 2
                                       - 3 * (ux ** 2 + uy ** 2)[..., None] / 2)
    F += -(1.0 / tau) * (F - Feq)
    F[cylinder, :] = bndryF
    vorticity = ((np.roll(ux, -1, axis=0) - np.roll(ux, 1, axis=0))
                 - (np.roll(uy, -1, axis=1) - np.roll(uy, 1, axis=1)))
    vorticity[cylinder] = np.nan
    return vorticity, rho.mean()


def _lbm(Ny, Nx, seed=0):
    rng = np.random.default_rng(seed)
    F = np.ones((Ny, Nx, 9)) + 0.01 * rng.standard_normal((Ny, Nx, 9))
    X, Y = np.meshgrid(range(Nx), range(Ny))
    F[:, :, 3] += 2 * (1 + 0.2 * np.cos(2 * np.pi * X / Nx * 4))
    return F, (X - Nx / 4) ** 2 + (Y - Ny / 2) ** 2 < (Ny / 4) ** 2, 0.6


def test_lattice_boltzmann_cylinder_reflection_compiles():
    """Before the fix every call ran eagerly ('indexing it on x[mask]' at ``bndryF[:,
    [0, 5, ...]]``, then the data-dependent shape of ``F[cylinder, :] = bndryF``)."""
    f = run_calls(lbm_step, [_lbm(4, 6)], **F64)
    no_internal_errors(f)
    assert all_compiled(f, 2), f.explain()


def reorder_selected(x, m):
    s = x[m, :][:, [2, 0, 1]]
    y = x.copy()
    y[m, :] = s
    return y, s.sum(), s[:, 0].sum(), s[..., 1:].max(axis=0, initial=-np.inf)


def index_selected_by(x, m, idx):
    y = np.zeros_like(x)
    y[m] = x[m][:, idx]
    return y, x[m, ...][:, ::-1].sum(axis=0)


def first_selected(x, m):
    return x[m][0]


def _masked(n, seed, p=0.5, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)).astype(dtype)
    x[0, 1] = np.nan
    return x, rng.random(n) < p


def test_a_selection_indexed_over_its_trailing_dims():
    """Lists, ints, slices, Ellipsis and a traced index array over the trailing dims; an
    empty selection, NaN, a reversed input; NumPy's IndexError for a
    list entry out of range. Indexing the selected axis itself still runs eagerly."""
    x, m = _masked(5, 0)
    f = run_calls(reorder_selected, [(x, m), _masked(7, 1), _masked(4, 2, p=0.0), (x[::-1], m)])
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 4 and not f.stats()["eager_calls"], f.explain()
    g = run_calls(index_selected_by, [(x, m, np.array([2, 1, 0])), (x, m, np.array([0, 0, 1])),
                                      (x, m, np.array([0, 3, 1]))])
    no_internal_errors(g)
    h = run_calls(first_selected, [(x, m)])
    assert "indexing it on x[mask]" in repr(h.stats()["eager_reasons"]), h.explain()


def write_mask_rows(F, m):
    F[m, :] = 1.0
    F[m, ...] = F[m, :] * 2
    return F


def test_a_write_through_a_mask_followed_by_full_slices():
    """``F[mask, :] = scalar`` and ``= F[mask, :] * 2`` compile; a mask over both dims of a
    2-d mask's grid, and NumPy's IndexError for more slices than dims."""
    rng = np.random.default_rng(5)
    f = run_calls(write_mask_rows, [(rng.standard_normal((4, 2)), rng.random(4) < 0.5),
                                    (rng.standard_normal((3, 2, 2)), rng.random((3, 2)) < 0.5)])
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 2, f.explain()
    run_calls(write_mask_rows, [(np.ones(4), np.array([True, False, True, False]))])


def selected_extremes(x, m):
    s = x[m]
    return (np.max(s, initial=0), s.min(initial=1), np.max(s, axis=0, initial=-1),
            s.max(axis=1, initial=0.5).sum(), s.max(axis=0, keepdims=True, initial=2))


def test_max_and_min_of_a_selection_with_initial():
    """Before the fix ``x[mask].max(initial=...)`` raised a TypeError out of the jitted call
    (the selection's methods took no ``initial``) where NumPy runs; ``np.max(x[mask],
    initial=0)`` ran eagerly. Now both compile, empty selections included (no error, as
    NumPy's); NaN, signed zeros and int32; an ``initial`` a uint8 array cannot hold
    raises NumPy's OverflowError. Other keywords (``where=``) run eagerly."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 3)) * 3
    m = rng.random(5) < 0.5
    nan = x.copy()
    nan[1, 2] = np.nan
    f = run_calls(selected_extremes, [
        (x, m), (x[:4], np.zeros(4, bool)), (nan, np.ones(5, bool)), (-np.zeros((4, 3)), m[:4]),
        ((x * 10).astype(np.int32), m), ((x * 10).astype(np.uint8), m)])
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 5, f.explain()
    g = run_calls(lambda v, k: v[k].sum(where=True), [(x, m)])
    assert "where=" in repr(g.stats()["eager_reasons"]), g.explain()


# --- pmocz's n-body energy: inverse distances where they are not 0 -------------------------
def nbody_energy(pos, vel, mass, G):
    KE = 0.5 * np.sum(np.sum(mass * vel ** 2))
    x, y, z = pos[:, 0:1], pos[:, 1:2], pos[:, 2:3]
    dx, dy, dz = x.T - x, y.T - y, z.T - z
    inv_r = np.sqrt(dx ** 2 + dy ** 2 + dz ** 2)
    inv_r[inv_r > 0] = 1.0 / inv_r[inv_r > 0]
    PE = G * np.sum(np.sum(np.triu(-(mass * mass.T) * inv_r, 1)))
    return KE, PE


def _bodies(N, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N, 3)).astype(dtype), rng.standard_normal((N, 3)).astype(dtype),
            (20.0 * np.ones((N, 1)) / N).astype(dtype), 1.0)


def test_inverse_distances_off_the_diagonal_compile():
    """Before the fix every call took a guard-margin exit (eager): the distance of a body
    to itself is exactly 0 on both sides, but ``dx ** 2`` and ``np.sqrt`` of it carried
    the rounding's underflow floor, so ``inv_r > 0`` was undecided on the diagonal. Two
    bodies at one place (zeros off the diagonal too)."""
    pos, vel, mass, G = _bodies(5, 0)
    pos[3] = pos[1]
    f = run_calls(nbody_energy, [_bodies(5, 1), (pos, vel, mass, G)], **F64)
    no_internal_errors(f)
    assert all_compiled(f, 4), f.explain()


def drift_then_inverse_distances(pos, vel, dt):
    """A leapfrog drift by a velocity through tanh (a computed position, with a rounding
    bound), then pmocz's inverse distances and a boids-style pairwise offset."""
    pos = pos + np.tanh(vel) * dt
    x = pos[:, 0:1]
    dx = x.T - x
    inv_r = np.sqrt(dx ** 2)
    inv_r[inv_r > 0] = 1.0 / inv_r[inv_r > 0]
    diff = pos[:, None, :] - pos[None, :, :]
    dist = np.sqrt((diff ** 2).sum(-1))
    near = (dist > 0) & (dist < 1.0)
    return inv_r.sum(), near.sum(axis=1), np.where(dist > 0, 1 / np.where(dist > 0, dist, 1), 0)


def test_a_computed_position_minus_itself_is_exact():
    """Before the fix every call took a guard-margin exit: the diagonal of ``x.T - x`` and
    of ``pos[:, None] - pos[None]`` carried the positions' bounds, though each reads one
    element twice (0 on both sides), so ``inv_r > 0`` and ``dist > 0`` were undecided
    there (tracer/element_sources.py). Two bodies at one computed place stay undecided
    (eager decides: their rows need not round alike)."""
    rng = np.random.default_rng(9)

    def bodies(n):
        return rng.standard_normal((n, 3)), rng.standard_normal((n, 3)), 0.1

    pos, vel, dt = bodies(4)
    pos[2], vel[2] = pos[1], vel[1]
    f = run_calls(drift_then_inverse_distances, [bodies(4), (pos, vel, dt)], **F64)
    no_internal_errors(f)
    stats = f.stats()
    assert stats["compiled_calls"] + stats["traced_calls"] >= 2, f.explain()


def constant_minus_computed(x):
    y = np.tanh(x)
    return (1.0 - y > 0.5).sum(), (y - 0.25 < 0).sum()


def test_a_constant_minus_a_computed_value_has_its_margin():
    """An operand that is a constant (a Literal) reads no array: an internal error while
    the margins looked for one (every call eager) in the first form of the check above."""
    rng = np.random.default_rng(10)
    f = run_calls(constant_minus_computed, [(rng.standard_normal(5),)])
    no_internal_errors(f)
    assert all_compiled(f, 2), f.explain()


# --- gym's CartPole: the state a tuple of Python floats the step rebinds --------------------
class CartPole:
    """gym's ``classic_control/cartpole.py`` step (Euler), its state a tuple of floats."""

    def __init__(self, state):
        self.gravity, self.masscart, self.masspole = 9.8, 1.0, 0.1
        self.total_mass = self.masspole + self.masscart
        self.length = 0.5
        self.polemass_length = self.masspole * self.length
        self.force_mag, self.tau = 10.0, 0.02
        self.theta_threshold_radians, self.x_threshold = 12 * 2 * math.pi / 360, 2.4
        self.state = tuple(float(v) for v in state)

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
        return np.array(self.state, dtype=np.float32), 1.0, terminated


def test_cartpole_state_tuple_the_step_rebinds_compiles():
    """Before the fix every call was a new variant (each float of ``self.state`` guarded by
    value as a setting) until ``max_variants``, then eager. The tuple's numbers are now
    run-time inputs (its length guarded), and the compiled calls store a tuple of Python
    floats, as eager does."""
    eager, compiled = CartPole([0.01, 0.02, -0.03, 0.04]), CartPole([0.01, 0.02, -0.03, 0.04])
    f = tj.jit(compiled.step, cache="memory")
    for action in (1, 1, 1, 1, 1, 1, 1, 1):
        assert_same(f(action), eager.step(action), rtol=1e-6, atol=1e-7)
        assert compiled.state == eager.state
        assert [type(v) for v in compiled.state] == [float] * 4
    no_internal_errors(f)
    assert f.stats()["compiled_calls"] >= 6, f.explain()
    compiled.state = eager.state = (0, 0.5, 0.0, True)  # other types: as eager
    assert_same(f(0), eager.step(0), rtol=1e-6, atol=1e-7)
    assert compiled.state == eager.state
    compiled.state = eager.state = (0.1, 0.2, 0.3)  # another length: eager's error
    with pytest.raises(ValueError):
        eager.step(1)
    with pytest.raises(ValueError):
        f(1)
