"""np.count_nonzero of traced arrays compiles (it ran eagerly on every call) and answers as
NumPy: NaN counts, int64 counts, a NumPy int64 where no axis is left, keepdims."""

import numpy as np
import pytest

import tracejit as tj

CASES = {
    "all": lambda x: np.count_nonzero(x),
    "mask": lambda x: np.count_nonzero(x > 0),
    "axis 0": lambda x: np.count_nonzero(x, axis=0),
    "both axes": lambda x: np.count_nonzero(x, axis=(0, 1)),
    "keepdims": lambda x: np.count_nonzero(x < 0, axis=1, keepdims=True),
    "no axis, keepdims": lambda x: np.count_nonzero(x, axis=None, keepdims=True),
    "0-d": lambda x: np.count_nonzero(x[0, 0]),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("name", sorted(CASES))
def test_count_nonzero_compiles_and_matches_numpy(name, dtype):
    function = CASES[name]
    f = tj.jit(function, cache=False)
    values = [np.array([[1.0, 0.0, np.nan], [0.0, -0.0, -2.0]]), np.zeros((2, 3)),
              np.arange(12.0).reshape(4, 3) - 5]
    for x in values:
        with np.errstate(invalid="ignore"):
            x = x.astype(dtype) if dtype != np.int64 else np.nan_to_num(x).astype(dtype)
        for _ in range(2):
            got, want = f(x.copy()), function(x.copy())
            assert type(got) is type(want), (type(got), type(want))
            assert np.asarray(got).dtype == np.asarray(want).dtype
            np.testing.assert_array_equal(got, want)
    assert not f.stats()["eager_calls"], f.stats()


def test_count_nonzero_of_a_tensor_is_a_tensor():
    t = tj.tensor([1.0, 0.0, 2.0], requires_grad=True)
    count = np.count_nonzero(t)
    assert isinstance(count, tj.Tensor) and int(count.numpy()) == 2
