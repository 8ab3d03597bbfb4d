"""NumPy calls that Tensors differentiate eagerly but compiled code does not run:
``np.arctan2``, ``np.linalg.inv`` and ``np.linalg.det``.

Each is declared once, as a primitive is (a NumPy implementation and one VJP rule per
argument, ``rule(g, *primals, out=...)``), so the tape records and differentiates it
with the same code as the op table's (``tracejit.tracer.autodiff.cotangent``). They are
not in the op table: there is no lowering for them, so the tracer still refuses them
and a jit function that calls one runs eagerly on the tape, with the reason.

>>> import numpy as np
>>> from tracejit import tensor
>>> a = tensor([[2.0, 1.0], [1.0, 3.0]], requires_grad=True)
>>> np.linalg.det(a).backward()
>>> a.grad.round(12).tolist()  # d det / dA = det(A) inv(A).T, the cofactors
[[3.0, -1.0], [-1.0, 2.0]]
"""

from __future__ import annotations

import numpy as np


class EagerOp:
    """An operation only Tensors run (``Tensor.__tracejit_bind__`` takes it as it takes a
    primitive): ``impl`` computes it, ``vjp`` holds one rule per argument."""

    def __init__(self, name, impl, vjp):
        self.name = name
        self.impl = impl
        self.vjp = vjp

    def vjp_rule(self, argnum):
        return self.vjp[argnum]

    def __repr__(self):
        return f"<eager op {self.name}>"


def _transpose(matrices):
    return np.swapaxes(matrices, -1, -2)


def _arctan2_vjp_y(g, y, x, out):
    return g * x / (x * x + y * y)


def _arctan2_vjp_x(g, y, x, out):
    return -g * y / (x * x + y * y)


def _inv_vjp(g, a, out):
    # d(A^-1) = -A^-1 dA A^-1
    return -_transpose(out) @ g @ _transpose(out)


def _adjugate(a):
    """adj(A) = det(A) A^-1, also for singular A: from the SVD A = U S V^T,
    adj(A) = det(U) det(V) V diag(prod_{j != i} s_j) U^T (no division by a zero s_j)."""
    u, s, vt = np.linalg.svd(a)
    ones = np.ones(s.shape[:-1] + (1,), s.dtype)
    before = np.cumprod(np.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)
    after = np.cumprod(np.concatenate([ones, s[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    others = before * after
    signs = np.linalg.det(u) * np.linalg.det(vt)
    return signs[..., None, None] * (_transpose(vt) * others[..., None, :]) @ _transpose(u)


def _det_vjp(g, a, out):
    return np.asarray(g)[..., None, None] * _transpose(_adjugate(a))


ARCTAN2 = EagerOp("arctan2", np.arctan2, (_arctan2_vjp_y, _arctan2_vjp_x))
INV = EagerOp("inv", np.linalg.inv, (_inv_vjp,))
DET = EagerOp("det", np.linalg.det, (_det_vjp,))

# NumPy callable -> EagerOp, for Tensor.__array_ufunc__ / __array_function__
UFUNCS = {np.arctan2: ARCTAN2}
FUNCTIONS = {np.linalg.inv: INV, np.linalg.det: DET}
