"""Convolution, pooling and the other layers of issue 14 (``tracejit.nn``) against direct
NumPy references written here, three ways: plain ndarrays, eager Tensors and ``jit``
(forward and compiled backward), with gradients against central finite differences and
one compile per size bucket. PyTorch checks run only where ``import torch`` works."""

from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.testing import assert_compiled_matches_eager

try:  # optional: a second reference where it is installed
    import torch
    import torch.nn.functional as torch_functional
except ImportError:  # pragma: no cover - depends on the machine
    torch = None


# --- references: loops over kernel offsets and output positions ------------------------
def _pair(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def conv2d_reference(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    if padding == "valid":
        padding = 0
    if padding == "same":  # PyTorch's split: the odd element after
        totals = [(k - 1) * d for k, d in zip(w.shape[2:], _pair(dilation))]
        x = np.pad(x, ((0, 0), (0, 0)) + tuple((t // 2, t - t // 2) for t in totals))
        padding = 0
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    out_h = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    out_w = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((n, f, out_h, out_w), np.result_type(x, w))
    fg = f // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = padded[:, g * cg:(g + 1) * cg,
                               i * dh:i * dh + sh * (out_h - 1) + 1:sh,
                               j * dw:j * dw + sw * (out_w - 1) + 1:sw]
                out[:, g * fg:(g + 1) * fg] += np.einsum(
                    "nchw,fc->nfhw", patch, w[g * fg:(g + 1) * fg, :, i, j])
    return out if b is None else out + b[:, None, None]


def pool_reference(x, kernel, stride, padding, reduce, fill, dilation=1):
    (kh, kw), (sh, sw), (ph, pw) = _pair(kernel), _pair(stride), _pair(padding)
    dh, dw = _pair(dilation)
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    out_h = (padded.shape[2] - dh * (kh - 1) - 1) // sh + 1
    out_w = (padded.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros(x.shape[:2] + (out_h, out_w), x.dtype)
    for i in range(out_h):
        for j in range(out_w):
            window = padded[:, :, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                            j * sw:j * sw + dw * (kw - 1) + 1:dw]
            out[:, :, i, j] = reduce(window, axis=(2, 3))
    return out


def adaptive_reference(x, out_h, out_w):
    h, w = x.shape[-2:]
    out = np.zeros(x.shape[:-2] + (out_h, out_w), x.dtype)
    for i in range(out_h):
        for j in range(out_w):
            rows = slice(i * h // out_h, -(-(i + 1) * h // out_h))
            cols = slice(j * w // out_w, -(-(j + 1) * w // out_w))
            out[..., i, j] = x[..., rows, cols].mean(axis=(-2, -1))
    return out


def finite_difference_gradients(loss, inputs, eps=1e-6):
    gradients = []
    for position, value in enumerate(inputs):
        gradient = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            values = []
            for sign in (1, -1):
                shifted = [item.copy() for item in inputs]
                shifted[position][index] += sign * eps
                values.append(loss(*shifted))
            gradient[index] = (values[0] - values[1]) / (2 * eps)
        gradients.append(gradient)
    return gradients


def jitted(function, **options):
    return tj.jit(function, dynamic=True, cache="memory", **options)


# --- conv2d ---------------------------------------------------------------------------
CONV_CASES = {
    # name: (x shape, w shape, keyword arguments)
    "plain": ((2, 3, 9, 11), (4, 3, 3, 3), {}),
    "padding": ((2, 3, 9, 11), (4, 3, 3, 3), dict(padding=1)),
    "stride-2": ((2, 3, 11, 13), (5, 3, 3, 3), dict(stride=2, padding=1)),
    "stride-pair": ((1, 2, 13, 10), (3, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0))),
    "dilation": ((2, 2, 13, 11), (3, 2, 3, 3), dict(dilation=2, padding=2)),
    "groups": ((2, 4, 9, 10), (6, 2, 3, 3), dict(groups=2, padding=1)),
    "depthwise": ((1, 3, 10, 9), (3, 1, 3, 3), dict(groups=3, padding=1)),
    "kernel-5": ((1, 3, 17, 19), (4, 3, 5, 5), dict(padding=2)),
    "1x1": ((2, 5, 9, 9), (3, 5, 1, 1), {}),
    # more channels than filters: the eager reference's one-matmul-per-tap path
    "channels>filters": ((2, 6, 9, 11), (2, 6, 3, 3), dict(padding=1)),
    "channels>filters-groups-dilation": ((1, 8, 10, 9), (4, 4, 3, 2),
                                         dict(groups=2, dilation=(2, 1), padding=(2, 1))),
    "same": ((1, 2, 11, 12), (3, 2, 4, 3), dict(padding="same")),
    "valid": ((1, 2, 11, 12), (3, 2, 3, 3), dict(padding="valid")),
    "prime-odd": ((1, 3, 7, 13), (2, 3, 3, 3), dict(stride=3, padding=1)),
    "unit-image": ((1, 3, 1, 1), (2, 3, 1, 1), {}),
    "empty-batch": ((0, 3, 9, 9), (2, 3, 3, 3), dict(padding=1)),
}


def conv_arguments(case, dtype=np.float64, seed=0, bias=True):
    x_shape, w_shape, options = CONV_CASES[case]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype) if bias else None
    return x, w, b, options


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv2d_on_ndarrays_and_tensors_matches_the_reference(case):
    x, w, b, options = conv_arguments(case)
    expected = conv2d_reference(x, w, b, **options)
    np.testing.assert_allclose(nn.conv2d(x, w, b, **options), expected, rtol=1e-12,
                               atol=1e-12)
    result = nn.conv2d(tj.tensor(x), tj.tensor(w), tj.tensor(b), **options)
    assert isinstance(result, tj.Tensor)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv2d_compiled_matches_eager(case, dtype):
    x, w, b, options = conv_arguments(case, dtype)
    other, _, _, _ = conv_arguments(case, dtype, seed=1)

    def layer(x, w, b):
        return nn.conv2d(x, w, b, **options)

    tolerance = 1e-5 if dtype == np.float32 else None
    assert_compiled_matches_eager(layer, (x, w, b), (other, w, b), rtol=tolerance,
                                  atol=tolerance, dynamic=True, cache="memory")
    np.testing.assert_allclose(jitted(layer)(x, w, b), conv2d_reference(x, w, b, **options),
                               rtol=tolerance or 1e-12, atol=tolerance or 1e-12)


@pytest.mark.parametrize("case", ["padding", "stride-2", "dilation", "groups", "same",
                                  "stride-pair"])
def test_conv2d_compiled_gradients_match_finite_differences(case):
    x, w, b, options = conv_arguments(case, seed=2)
    x = x[:1, :, :7, :8].copy()  # small: finite differences cost two calls per element

    def loss(x, w, b):
        return np.sum(np.tanh(nn.conv2d(x, w, b, **options)))

    compiled = jitted(loss)
    tensors = [tj.tensor(value, requires_grad=True) for value in (x, w, b)]
    compiled(*tensors).backward()
    compiled(*tensors)  # the second call of the variant runs native code
    expected = finite_difference_gradients(loss, [x, w, b])
    for tensor, want in zip(tensors, expected):
        np.testing.assert_allclose(tensor.grad, want, rtol=1e-5, atol=1e-6)
    assert compiled.stats()["compiled_calls"] >= 1
    # and the compiled backward agrees with the eager tape
    assert_compiled_matches_eager(loss, (x, w, b), grads=True, dynamic=True, cache="memory")


def test_conv2d_compiles_once_per_size_bucket():
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)

    def layer(x, w, b):
        return nn.relu(nn.conv2d(x, w, b, padding=1))

    compiled = jitted(layer)
    # Bucket [9, 16]^2, square first and the batch the same size as the image: the axes
    # of one image batch get a symbol each (tracing._symbol_for), so one compile serves
    # every size in the bucket.
    sizes = [(12, 12), (16, 10), (9, 9), (13, 16), (10, 15), (12, 11)]
    for height, width in sizes:
        x = rng.standard_normal((12, 3, height, width))
        for _ in range(2):
            np.testing.assert_allclose(compiled(x, w, b), np.maximum(
                conv2d_reference(x, w, b, padding=1), 0), rtol=1e-12, atol=1e-12)
    assert compiled.stats()["compiles"] == 1, compiled.explain()
    assert compiled.stats()["compiled_calls"] == 2 * len(sizes) - 1


def test_conv2d_rejects_mismatched_channels():
    with pytest.raises(ValueError, match="groups"):
        nn.conv2d(np.ones((1, 4, 5, 5)), np.ones((2, 3, 3, 3)))
    with pytest.raises(ValueError, match="strided"):
        nn.conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), stride=2, padding="same")


@pytest.mark.parametrize("options", [{}, dict(stride=2, padding=1), dict(dilation=2),
                                     dict(groups=2, padding="same")])
def test_conv1d_matches_the_reference(options):
    rng = np.random.default_rng(4)
    x, w, b = rng.standard_normal((2, 4, 13)), rng.standard_normal((6, 4 // options.get(
        "groups", 1), 3)), rng.standard_normal(6)
    padding = options.get("padding", 0)
    options2d = dict(stride=(1, options.get("stride", 1)), dilation=(1, options.get(
        "dilation", 1)), groups=options.get("groups", 1),
        padding=padding if isinstance(padding, str) else (0, padding))
    expected = conv2d_reference(x[:, :, None], w[:, :, None], b, **{
        key: value for key, value in options2d.items() if value != "same"})[:, :, 0] \
        if padding != "same" else None
    if expected is None:  # 'same' with an odd kernel: padding (k - 1) // 2 each side
        expected = conv2d_reference(x[:, :, None], w[:, :, None], b, padding=(0, 1),
                                    groups=2)[:, :, 0]

    def layer(x, w, b):
        return nn.conv1d(x, w, b, **options)

    np.testing.assert_allclose(layer(x, w, b), expected, rtol=1e-12, atol=1e-12)
    assert_compiled_matches_eager(layer, (x, w, b), dynamic=True, cache="memory")


# --- pooling --------------------------------------------------------------------------
POOL_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(1, 2)),
    dict(kernel_size=3, stride=1, padding=1),
]


@pytest.mark.parametrize("options", POOL_CASES, ids=str)
@pytest.mark.parametrize("shape", [(2, 3, 9, 11), (1, 2, 13, 7), (0, 2, 8, 8)], ids=str)
def test_max_pool2d_matches_the_reference(options, shape):
    x = np.random.default_rng(5).standard_normal(shape)
    kernel = options["kernel_size"]
    expected = pool_reference(x, kernel, options.get("stride", kernel),
                              options.get("padding", 0), np.max, -np.inf)

    def layer(x):
        return nn.max_pool2d(x, **options)

    np.testing.assert_array_equal(layer(x), expected)
    np.testing.assert_array_equal(layer(tj.tensor(x)).numpy(), expected)
    assert_compiled_matches_eager(layer, x, dynamic=True, cache="memory")


def test_max_pool2d_with_dilation():
    x = np.random.default_rng(6).standard_normal((1, 2, 11, 12))
    expected = pool_reference(x, 3, 1, 1, np.max, -np.inf, dilation=2)
    np.testing.assert_array_equal(nn.max_pool2d(x, 3, 1, 1, dilation=2), expected)


@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("options", POOL_CASES, ids=str)
def test_avg_pool2d_matches_the_reference(options, include):
    x = np.random.default_rng(7).standard_normal((2, 3, 9, 11))
    kernel = options["kernel_size"]
    stride, padding = options.get("stride", kernel), options.get("padding", 0)
    total = pool_reference(x, kernel, stride, padding, np.sum, 0.0)
    if include:
        expected = total / np.prod(_pair(kernel))
    else:
        expected = total / pool_reference(np.ones_like(x), kernel, stride, padding, np.sum,
                                          0.0)

    def layer(x):
        return nn.avg_pool2d(x, count_include_pad=include, **options)

    np.testing.assert_allclose(layer(x), expected, rtol=1e-12, atol=1e-12)
    assert_compiled_matches_eager(layer, x, dynamic=True, cache="memory")


@pytest.mark.parametrize("output", [(1, 1), (2, 3), (4, 4), (7, 5), (3, None)])
def test_adaptive_avg_pool2d_matches_the_reference(output):
    rng = np.random.default_rng(8)
    shapes = [(2, 3, 9, 11), (2, 3, 13, 16), (2, 3, 16, 9)]  # one bucket

    def layer(x):
        return nn.adaptive_avg_pool2d(x, output)

    for shape in shapes:
        x = rng.standard_normal(shape)
        out_h, out_w = output[0], output[1] if output[1] is not None else shape[3]
        np.testing.assert_allclose(layer(x), adaptive_reference(x, out_h, out_w),
                                   rtol=1e-12, atol=1e-12)
    compiled = jitted(layer)
    assert_compiled_matches_eager(compiled, *[rng.standard_normal(shape) for shape in shapes])
    assert compiled.stats()["compiles"] == 1, compiled.explain()


@pytest.mark.parametrize("layer", [
    lambda x: nn.max_pool2d(x, 3, 2, 1),
    lambda x: nn.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    lambda x: nn.adaptive_avg_pool2d(x, (2, 3)),
], ids=["max", "avg", "adaptive"])
def test_pooling_gradients_match_finite_differences(layer):
    x = np.random.default_rng(9).standard_normal((1, 2, 7, 8))

    def loss(x):
        return np.sum(np.sin(layer(x)))

    compiled = jitted(loss)
    tensor = tj.tensor(x, requires_grad=True)
    compiled(tensor).backward()
    (expected,) = finite_difference_gradients(loss, [x])
    np.testing.assert_allclose(tensor.grad, expected, rtol=1e-5, atol=1e-6)


# --- batch_norm, embedding, pad -------------------------------------------------------
def test_batch_norm_training_returns_new_running_statistics():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((4, 3, 5, 6))
    weight, bias = rng.standard_normal(3), rng.standard_normal(3)
    mean, var = rng.standard_normal(3), rng.random(3) + 0.5

    def layer(x, mean, var, weight, bias):
        return nn.batch_norm(x, mean, var, weight, bias, training=True, momentum=0.2)

    out, new_mean, new_var = layer(x, mean, var, weight, bias)
    batch_mean = x.mean(axis=(0, 2, 3))
    batch_var = x.var(axis=(0, 2, 3))
    normalized = (x - batch_mean[:, None, None]) / np.sqrt(batch_var[:, None, None] + 1e-5)
    np.testing.assert_allclose(out, normalized * weight[:, None, None] + bias[:, None, None],
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(new_mean, 0.8 * mean + 0.2 * batch_mean, rtol=1e-12)
    count = x.size // 3
    np.testing.assert_allclose(new_var, 0.8 * var + 0.2 * batch_var * count / (count - 1),
                               rtol=1e-12)
    assert_compiled_matches_eager(layer, (x, mean, var, weight, bias),
                                  (x[:, :, :4], mean, var, weight, bias), dynamic=True,
                                  cache="memory")


def test_batch_norm_eval_uses_running_statistics():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 4))
    mean, var = rng.standard_normal(3), rng.random(3) + 0.5

    def layer(x, mean, var):
        return nn.batch_norm(x, mean, var)

    expected = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5)
    np.testing.assert_allclose(layer(x, mean, var), expected, rtol=1e-12)
    assert_compiled_matches_eager(layer, (x, mean, var), dynamic=True, cache="memory")


def test_batch_norm_gradient_matches_finite_differences():
    rng = np.random.default_rng(12)
    x, weight, bias = rng.standard_normal((3, 2, 4)), rng.standard_normal(2), \
        rng.standard_normal(2)

    def loss(x, weight, bias):
        out, _, _ = nn.batch_norm(x, np.zeros(2), np.ones(2), weight, bias, training=True)
        return np.sum(np.sin(out))

    compiled = jitted(loss)
    tensors = [tj.tensor(value, requires_grad=True) for value in (x, weight, bias)]
    compiled(*tensors).backward()
    expected = finite_difference_gradients(loss, [x, weight, bias])
    for tensor, want in zip(tensors, expected):
        np.testing.assert_allclose(tensor.grad, want, rtol=1e-5, atol=1e-6)


def test_embedding_rows_and_padding_gradient():
    rng = np.random.default_rng(13)
    weight = rng.standard_normal((5, 3))
    indices = np.array([[0, 2, 2], [4, 1, 0]])
    np.testing.assert_array_equal(nn.embedding(indices, weight), weight[indices])

    def loss(weight):
        return np.sum(nn.embedding(indices, weight, padding_idx=0) ** 2)

    tensor = tj.tensor(weight, requires_grad=True)
    jitted(loss)(tensor).backward()
    expected = np.zeros_like(weight)
    np.add.at(expected, indices, 2 * weight[indices])
    expected[0] = 0  # the padding row gets no gradient
    np.testing.assert_allclose(tensor.grad, expected, rtol=1e-12)
    assert_compiled_matches_eager(lambda w: nn.embedding(indices, w), weight)


@pytest.mark.parametrize("widths, mode, value", [
    ((1, 2), "constant", 0.0), ((1, 2, 0, 3), "constant", -1.5), ((2, 1, 1, 1), "reflect", 0),
    ((3, 0, 2, 2), "replicate", 0), ((-1, 2, 1, -2), "constant", 0.0),
])
def test_pad_matches_numpy(widths, mode, value):
    x = np.random.default_rng(14).standard_normal((2, 9, 10))
    numpy_widths = [(0, 0)] * 3
    for position in range(len(widths) // 2):
        numpy_widths[2 - position] = (widths[2 * position], widths[2 * position + 1])
    cropped = x[tuple(slice(max(-low, 0), x.shape[axis] - max(-high, 0))
                      for axis, (low, high) in enumerate(numpy_widths))]
    positive = [(max(low, 0), max(high, 0)) for low, high in numpy_widths]
    numpy_mode = {"replicate": "edge"}.get(mode, mode)
    extra = dict(constant_values=value) if mode == "constant" else {}
    expected = np.pad(cropped, positive, mode=numpy_mode, **extra)

    def layer(x):
        return nn.pad(x, widths, mode=mode, value=value)

    np.testing.assert_array_equal(layer(x), expected)
    compiled = jitted(layer)
    assert_compiled_matches_eager(compiled, x, x[:, :12, :11] + 1)
    assert compiled.stats()["compiles"] == 1, compiled.explain()


# --- a conv net on any image size -----------------------------------------------------
def small_cnn(x, params):
    out = nn.relu(nn.conv2d(x, params["w1"], params["b1"], padding=1))
    out = nn.max_pool2d(out, 2)
    out = nn.relu(nn.conv2d(out, params["w2"], params["b2"], stride=2, padding=1))
    out = nn.adaptive_avg_pool2d(out, 1).reshape(out.shape[0], -1)
    return nn.linear(out, params["w3"], params["b3"])


def test_conv_net_trains_on_several_image_sizes_with_one_compile_per_bucket():
    rng = np.random.default_rng(15)
    params = {"w1": rng.standard_normal((4, 3, 3, 3)) * 0.3, "b1": np.zeros(4),
              "w2": rng.standard_normal((6, 4, 3, 3)) * 0.3, "b2": np.zeros(6),
              "w3": rng.standard_normal((6, 2)) * 0.3, "b3": np.zeros(2)}

    def loss(params, x, labels):
        return nn.cross_entropy(small_cnn(x, params), labels)

    step = tj.jit(tj.value_and_grad(loss), dynamic=True, cache="memory")
    eager = tj.value_and_grad(loss)
    sizes = [(17, 20), (23, 19), (29, 31), (32, 17), (18, 27), (31, 24)]  # bucket [17, 32]
    for height, width in sizes:
        x = rng.standard_normal((2, 3, height, width))
        labels = rng.integers(0, 2, 2)
        value, gradients = step(params, x, labels)
        want_value, want_gradients = eager(params, x, labels)
        np.testing.assert_allclose(value, want_value, rtol=1e-10)
        for name in params:
            np.testing.assert_allclose(gradients[name], want_gradients[name], rtol=1e-8,
                                       atol=1e-10)
    assert step.stats()["compiles"] == 1, step.explain()


# --- PyTorch, where installed ---------------------------------------------------------
@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv2d_matches_torch(case):
    x, w, b, options = conv_arguments(case)
    expected = torch_functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                       torch.from_numpy(b), **options).numpy()
    np.testing.assert_allclose(nn.conv2d(x, w, b, **options), expected, rtol=1e-10,
                               atol=1e-10)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_pooling_matches_torch():
    x = np.random.default_rng(16).standard_normal((2, 3, 13, 11))
    tx = torch.from_numpy(x)
    np.testing.assert_allclose(nn.max_pool2d(x, 3, 2, 1),
                               torch_functional.max_pool2d(tx, 3, 2, 1).numpy())
    np.testing.assert_allclose(nn.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                               torch_functional.avg_pool2d(tx, 3, 2, 1,
                                                           count_include_pad=False).numpy())
    np.testing.assert_allclose(nn.adaptive_avg_pool2d(x, (4, 3)),
                               torch_functional.adaptive_avg_pool2d(tx, (4, 3)).numpy())


def test_conv2d_compiles_to_one_kernel_with_bias_and_activation_as_epilogue():
    """conv2d + bias + relu is one kernel: the direct convolution (tracejit.codegen.conv),
    whose epilogue adds the bias and applies relu to each row while it is in cache."""
    rng = np.random.default_rng(17)
    x, w, b = rng.standard_normal((2, 3, 11, 13)), rng.standard_normal((4, 3, 3, 3)), \
        rng.standard_normal(4)

    def layer(x, w, b):
        return nn.relu(nn.conv2d(x, w, b, padding=1))

    compiled = jitted(layer)
    compiled(x, w, b)
    assert compiled.lower(x, w, b).kernels == ["k0_conv_where (conv)"]
