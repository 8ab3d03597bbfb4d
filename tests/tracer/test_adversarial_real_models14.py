"""Adversarial real-model tests, round 13b: convolutional networks and training steps in the
idioms of public NumPy code (Victor Zhou's "CNNs from scratch" Conv3x3 / MaxPool2 / Softmax
classes and their many forks, CS231n's two-layer net and layer_utils sandwiches, numpy-ml's
"same"-padded Conv2D and BatchNorm2D, sliding-window/einsum convolutions in channels-last
gists, and early-stopping train loops), run eagerly and through ``jit`` on copies of the
same arguments and objects.

Covers what rounds 1-13a do not: layers whose regions come from a generator method
(``for im_region, i, j in self.iterate_regions(image)`` with ``yield``), state kept as
``self.last_input`` / ``self.last_totals`` between a forward and a backward in one train
step, max-pool backward by ``if im_region[i2, j2, f2] == amax[f2]`` in nested loops over
flat (tied) patches, a Softmax backward that ``continue``s on zero gradients and returns
from inside its loop; "same" padding computed from the image size for strides that do not
divide it, 1x1 images, channels-last windows by ``sliding_window_view`` and ``einsum``,
spatial batch norm with running statistics rebound and updated in place, 2x2 pooling that
crops odd edges, im2col by ``as_strided`` with strides from ``x.strides`` (channels-first
and -last, dilated, zero strides, transposed inputs, its gradient), channels-last max-pool
masks over relu zeros and NaN; a train step with
dropout masks passed in and Adam state filled by ``setdefault``; minibatches by
``np.array_split`` (unequal and empty batches); early-stopping decisions
at a validation loss exactly at, one ulp above and one ulp below the best loss.

Fixed while this round ran (their tests are regressions), each of which ran eagerly on
every call: im2col by ``as_strided`` over ``x.strides`` (``x.strides`` of a traced array
stopped the trace; now a stride is a step along one of the array's axes:
tracer/strided_views.py), minibatches by ``np.array_split`` (not supported), and any
function calling a generator (Zhou's region generators, minibatch generators: ``yield``
refused the rewrite; now a generator runs rewritten, and one that outlives the trace makes
the call run eagerly: tracer/generators.py). A first call of a layer that reads the shape
of the input it kept (``np.zeros(self.last_input.shape)`` after ``self.last_input = ...``)
was refused by its own variant ('entry refused its own call': the shape was guarded as a
setting). And a wrong answer this round's own change made and its probes caught before
it was used: ``x.strides`` returned or printed gave the tracer's stride objects. Slow, not
fixed: Zhou's full train step now compiles (4-8 s per variant: the pool backward's nested
loops unroll into a guard per element) and then takes a guard-margin exit on every call,
since ``im_region[i2, j2, f2] == amax[f2]`` is an equality of computed values, always
within rounding when it holds; before, its generators made it run eagerly at once.

Findings. A mask or an ``argmax`` of a float32 contraction decided differently from NumPy
when eager's values tie exactly or lie within rounding of the threshold: nothing checks them
(no error model for float32 products: the bound, ~K float32 ulps of the magnitudes, would
send nearly every call of a float32 classifier to eager). Mirror-symmetric images make such
ties common: with a mirrored pair of templates or an antisymmetric filter, the two sums hold
the same terms in another order, so NumPy's result ties (or is exactly 0) where the own
float32 GEMM (``codegen/gemm.py``) summed in its own order. A cs231n two-layer net's
``dh[a <= 0] = 0`` zeroed other gradient rows than NumPy's (half of ``dW1`` wrong) and a
classifier predicted other classes. Fixed (``codegen/numpy_products.py``): a float32
product a decision reads is computed by the OpenBLAS calls NumPy's matmul makes, so it has
NumPy's bits. An ``einsum`` convolution's relu mask differed even on the traced call
(NumPy's ``einsum`` sums in its own loops, not BLAS; the trace computes the contraction as a
product): fixed in round 20, a float32 product of exact operands that is not NumPy's
matmul takes a bound (one layer's ~K ulps, ``margin_rules._float32_modelled``), so the mask
is checked and eager decides near 0. Not a bug but a trap: in float32,
Adam turns the gradient of a bias placed before batch norm (zero but for rounding noise of
~1e-9) into a step of about ``lr`` whose sign is the noise's, so compiled and eager weights
differ there by a whole step; the train step here puts no bias before its batch norm.
"""

import copy

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided, sliding_window_view
from real_model_checks import assert_same, jitted, no_internal_errors, rng_for, run_calls

import tracejit as tj

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=1e-4, atol=1e-5)
TOLERANCE = {np.float64: F64, np.float32: F32}


# --- Victor Zhou's CNN: Conv3x3, MaxPool2 and Softmax objects with generator regions -------
class Conv3x3:
    def __init__(self, num_filters, rng):
        self.num_filters = num_filters
        self.filters = rng.standard_normal((num_filters, 3, 3)) / 9

    def iterate_regions(self, image):
        h, w = image.shape
        for i in range(h - 2):
            for j in range(w - 2):
                yield image[i:i + 3, j:j + 3], i, j

    def forward(self, image):
        self.last_input = image
        h, w = image.shape
        output = np.zeros((h - 2, w - 2, self.num_filters))
        for im_region, i, j in self.iterate_regions(image):
            output[i, j] = np.sum(im_region * self.filters, axis=(1, 2))
        return output

    def backward(self, d_out, learn_rate):
        d_filters = np.zeros(self.filters.shape)
        for im_region, i, j in self.iterate_regions(self.last_input):
            for f in range(self.num_filters):
                d_filters[f] += d_out[i, j, f] * im_region
        self.filters -= learn_rate * d_filters


class MaxPool2:
    def iterate_regions(self, image):
        h, w, _ = image.shape
        for i in range(h // 2):
            for j in range(w // 2):
                yield image[i * 2:i * 2 + 2, j * 2:j * 2 + 2], i, j

    def forward(self, image):
        self.last_input = image
        h, w, num_filters = image.shape
        output = np.zeros((h // 2, w // 2, num_filters))
        for im_region, i, j in self.iterate_regions(image):
            output[i, j] = np.amax(im_region, axis=(0, 1))
        return output

    def backward(self, d_out):
        d_input = np.zeros(self.last_input.shape)
        for im_region, i, j in self.iterate_regions(self.last_input):
            h, w, f = im_region.shape
            amax = np.amax(im_region, axis=(0, 1))
            for i2 in range(h):
                for j2 in range(w):
                    for f2 in range(f):
                        if im_region[i2, j2, f2] == amax[f2]:
                            d_input[i * 2 + i2, j * 2 + j2, f2] = d_out[i, j, f2]
        return d_input


class Softmax:
    def __init__(self, input_len, nodes, rng):
        self.weights = rng.standard_normal((input_len, nodes)) / input_len
        self.biases = np.zeros(nodes)

    def forward(self, image):
        self.last_input_shape = image.shape
        flat = image.flatten()
        self.last_input = flat
        totals = np.dot(flat, self.weights) + self.biases
        self.last_totals = totals
        exp = np.exp(totals)
        return exp / np.sum(exp, axis=0)

    def backward(self, d_out, learn_rate):
        for i, gradient in enumerate(d_out):
            if gradient == 0:
                continue
            t_exp = np.exp(self.last_totals)
            total = np.sum(t_exp)
            d_out_d_t = -t_exp[i] * t_exp / total ** 2
            d_out_d_t[i] = t_exp[i] * (total - t_exp[i]) / total ** 2
            d_t = gradient * d_out_d_t
            d_w = self.last_input[np.newaxis].T @ d_t[np.newaxis]
            d_input = self.weights @ d_t
            self.weights -= learn_rate * d_w
            self.biases -= learn_rate * d_t
            return d_input.reshape(self.last_input_shape)


class ZhouNet:
    def __init__(self, side, rng, classes=3):
        self.conv = Conv3x3(4, rng)
        self.pool = MaxPool2()
        pooled = (side - 2) // 2
        self.softmax = Softmax(pooled * pooled * 4, classes, rng)

    def state(self):
        return [self.conv.filters, self.softmax.weights, self.softmax.biases,
                self.softmax.last_totals, self.pool.last_input]


def zhou_train(net, image, label, learn_rate=0.005):
    out = net.conv.forward(image / 255 - 0.5)
    out = net.pool.forward(out)
    out = net.softmax.forward(out)
    loss = -np.log(out[label])
    accuracy = 1 if np.argmax(out) == label else 0
    gradient = np.zeros(out.shape[0])
    gradient[label] = -1 / out[label]
    gradient = net.softmax.backward(gradient, learn_rate)
    gradient = net.pool.backward(gradient)
    net.conv.backward(gradient, learn_rate)
    return loss, accuracy


def zhou_forward(net, image):
    out = net.conv.forward(image / 255 - 0.5)
    out = net.pool.forward(out)
    return net.softmax.forward(out)


def test_zhou_cnn_forward_through_generator_regions_compiles_over_image_sizes():
    """Victor Zhou's layers' forward passes walk their regions through generator methods
    (``yield im_region, i, j``) and keep ``last_input``; an odd size leaves the pool's last
    row out. It ran eagerly on every call (a generator could not be traced); the generator
    now runs rewritten and the loop over it unrolls (tracer/generators.py)."""
    rng = rng_for(1401)
    for side in (6, 7):
        net = ZhouNet(side, rng)
        eager_net, jit_net = copy.deepcopy(net), copy.deepcopy(net)
        f = jitted(zhou_forward)
        for _ in range(2):
            image = rng.integers(0, 256, (side, side)).astype(float)
            assert_same(f(jit_net, image), zhou_forward(eager_net, image), **F64)
            assert_same(jit_net.state()[3:], eager_net.state()[3:], where="layer state", **F64)
        assert f.stats()["compiled_calls"] > 0 and not f.stats()["eager_calls"], f.explain()


def test_zhou_cnn_train_steps_with_tied_pools_match_numpy():
    """Zhou's train loop calls ``train(im, label)`` image after image on the same layer
    objects: the pool's backward routes the gradient to every tied maximum (``if
    im_region[i2, j2, f2] == amax[f2]``; a flat patch ties four ways), the Softmax backward
    ``continue``s on zero gradients and returns from inside its loop. Results and every
    layer's state after each step are eager's (the ties are decided eagerly)."""
    rng = rng_for(1407)
    net = ZhouNet(6, rng)
    eager_net, jit_net = copy.deepcopy(net), copy.deepcopy(net)
    f = jitted(zhou_train)
    for step in range(2):
        image = rng.integers(0, 256, (6, 6)).astype(float)
        if step == 1:
            image[:4, :4] = 128.0                 # a flat patch: every pool window ties
            image[5, 5] = np.nan
        label = int(rng.integers(3))
        with np.errstate(all="ignore"):
            want = zhou_train(eager_net, image.copy(), label)
            got = f(jit_net, image.copy(), label)
        assert_same(got, want, **F64)
        assert_same(jit_net.state(), eager_net.state(), where="layer state", **F64)
    no_internal_errors(f)


def generator_escapes(image):
    return MaxPool2().iterate_regions(image[:, :, None])


def first_region_only(image):
    region, _, _ = next(MaxPool2().iterate_regions(image[:, :, None]))
    return region * 2


@pytest.mark.parametrize("model", [generator_escapes, first_region_only])
def test_a_generator_returned_or_left_part_way(model):
    """A generator the jitted function returns would run its steps after the trace: that
    call runs eagerly, as NumPy. One left part-way (``next(...)`` once) and dropped never
    runs again, in NumPy either: that compiles."""
    image = np.arange(16.0).reshape(4, 4)
    f = jitted(model)
    for _ in range(2):
        got, want = f(image), model(image)
        if model is generator_escapes:
            got, want = [region for region, _, _ in got], [region for region, _, _ in want]
        assert_same(got, want, **F64)
    escaped = "outlives the trace" in repr(f.stats()["eager_reasons"])
    assert escaped == (model is generator_escapes), f.explain()


class CachingPool:
    """A layer keeping its input for the backward, as Zhou's and numpy-ml's layers do."""

    def forward(self, x):
        self.last_input = x * 2.0
        return self.last_input.max(axis=0)

    def backward(self, d_out):
        d_input = np.zeros(self.last_input.shape)
        d_input[self.last_input.argmax(axis=0), np.arange(d_out.shape[0])] = d_out
        return d_input


class PoolNet:
    def __init__(self):
        self.pool = CachingPool()


def caching_pool_step(net, x):
    scale = 3.0 if x.sum() > 0 else -1.0          # a decision eager must be able to take
    return net.pool.backward(net.pool.forward(x) * scale)


def test_a_layer_reading_the_shape_of_the_input_it_kept_compiles_from_its_first_call():
    """``np.zeros(self.last_input.shape)`` after ``self.last_input = ...`` in the same call
    reads the trace's own array: its shape was entry-guarded as a setting of the layer, so a
    fresh layer's first call (no ``last_input`` yet), whose result comes from the compiled
    program when a decision of the trace may not be eager's, was refused by its own variant
    and ran eagerly, and so was every call after one with another size."""
    rng = rng_for(1408)
    net, eager_net = PoolNet(), PoolNet()
    f = jitted(caching_pool_step)
    for n in (4, 4, 6, 4):
        x = rng.standard_normal((n, 3))
        assert_same(f(net, x), caching_pool_step(eager_net, x), **F64)
        assert_same(net.pool.last_input, eager_net.pool.last_input, **F64)
    assert not f.stats()["eager_calls"], f.explain()


# --- CS231n-style max pool over channels-last windows with (x == max) masks -----------------
def max_pool_nhwc_forward_backward(x, dout, size):
    n, h, w, c = x.shape
    x = np.maximum(x, 0)                          # relu zeros tie inside a window
    h_out, w_out = h // size, w // size
    out = np.zeros((n, h_out, w_out, c), x.dtype)
    dx = np.zeros_like(x)
    for i in range(h_out):
        for j in range(w_out):
            window = x[:, i * size:(i + 1) * size, j * size:(j + 1) * size, :]
            peak = window.max(axis=(1, 2))
            out[:, i, j, :] = peak
            mask = window == peak[:, None, None, :]
            dx[:, i * size:(i + 1) * size, j * size:(j + 1) * size, :] += (
                mask * dout[:, i, j, :][:, None, None, :])
    return out, dx


def test_channels_last_max_pool_masks_over_relu_ties_nan_and_cropped_edges():
    rng = rng_for(1410)
    sets = []
    for n, h, w in [(2, 5, 5), (1, 4, 7), (3, 2, 2), (1, 9, 6)]:
        x = rng.standard_normal((n, h, w, 3))
        x[0, :2, :2, 0] = -1.0                    # all four relu to 0: a four-way tie
        x[-1, -2:, :2, 2] = 0.5                   # a positive tie
        if h == 9:
            x[0, 0, 1, 1] = np.nan
        sets.append((x, rng.standard_normal((n, h // 2, w // 2, 3)), 2))
    sets.append((sets[0][0][:, :, ::-1], sets[0][1], 2))      # a reversed (strided) view
    f = run_calls(max_pool_nhwc_forward_backward, sets, **F64)
    no_internal_errors(f)


# --- numpy-ml-style "same" conv by sliding windows and einsum, batch norm, 2x2 pool --------
def same_padding(size, kernel, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def conv2d_nhwc_same(X, W, stride):
    kh, kw, _, _ = W.shape
    padded = np.pad(X, ((0, 0), same_padding(X.shape[1], kh, stride),
                        same_padding(X.shape[2], kw, stride), (0, 0)))
    windows = sliding_window_view(padded, (kh, kw), axis=(1, 2))[:, ::stride, ::stride]
    return np.einsum("nhwcij,ijcf->nhwf", windows, W)


def conv_bn_relu_pool(X, W, gamma, beta, bn, stride, train):
    a = conv2d_nhwc_same(X, W, stride)
    if train:
        mu = a.mean(axis=(0, 1, 2))
        var = a.var(axis=(0, 1, 2))
        bn["running_mean"] = bn["momentum"] * bn["running_mean"] + (1 - bn["momentum"]) * mu
        bn["running_var"] *= bn["momentum"]
        bn["running_var"] += (1 - bn["momentum"]) * var
    else:
        mu, var = bn["running_mean"], bn["running_var"]
    h = np.maximum(gamma * (a - mu) / np.sqrt(var + 1e-5) + beta, 0)
    n, height, width, c = h.shape
    h = h[:, :height // 2 * 2, :width // 2 * 2]
    return h.reshape(n, height // 2, 2, width // 2, 2, c).max(axis=(2, 4)), h


def test_same_padded_einsum_conv_batchnorm_pool_over_sizes_strides_and_modes(dtype=np.float32):
    """numpy-ml's Conv2D "same" padding (computed from the size, so a stride of 2 or 3 that
    does not divide 7 or 13 pads unevenly), a 1x1 image, channels-last windows by
    ``sliding_window_view`` read with a stride, spatial batch norm whose running mean is
    rebound and whose running variance is updated in place, then a 2x2 pool that crops odd
    edges; train then test mode on the same bn dict."""
    rng = rng_for(1420)
    sets = []
    for n, h, w, stride in [(2, 7, 7, 2), (2, 1, 1, 1), (1, 11, 13, 3)]:
        X = rng.standard_normal((n, h, w, 2)).astype(dtype)
        W = rng.standard_normal((3, 3, 2, 4)).astype(dtype)
        bn = {"running_mean": np.zeros(4, dtype), "running_var": np.ones(4, dtype),
              "momentum": 0.9}
        for train in (True, False):
            sets.append((X, W, np.ones(4, dtype), np.zeros(4, dtype), bn, stride, train))
    f = run_calls(conv_bn_relu_pool, sets, repeats=1, **TOLERANCE[dtype])
    no_internal_errors(f)


# --- im2col by as_strided over the array's own strides -------------------------------------
def conv_nchw_as_strided(x, w, b, stride, pad):
    N, C, H, W = x.shape
    F, _, HH, WW = w.shape
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    H_out, W_out = (H + 2 * pad - HH) // stride + 1, (W + 2 * pad - WW) // stride + 1
    sN, sC, sH, sW = x_pad.strides
    windows = as_strided(x_pad, shape=(N, C, H_out, W_out, HH, WW),
                         strides=(sN, sC, sH * stride, sW * stride, sH, sW))
    return np.einsum("nchwij,fcij->nfhw", windows, w) + b[None, :, None, None]


def im2col_nhwc_as_strided(X, k, stride):
    n, h, w, c = X.shape
    sn, sh, sw, sc = X.strides
    h_out, w_out = (h - k) // stride + 1, (w - k) // stride + 1
    cols = as_strided(X, (n, h_out, w_out, k, k, c), (sn, sh * stride, sw * stride, sh, sw, sc),
                      writeable=False)
    return cols.reshape(n * h_out * w_out, k * k * c)


def dilated_taps(x, dilation):
    (step,) = x.strides
    return as_strided(x, (x.shape[0] - 2 * dilation, 3), (step, dilation * step)).sum(axis=1)


def rows_repeated(x, n):
    (step,) = x.strides
    return as_strided(x, (n, x.shape[0]), (0, step)) * 2.0


@pytest.mark.parametrize("model, sets", [
    (conv_nchw_as_strided, lambda rng: [
        (rng.standard_normal((2, 2, h, h)), rng.standard_normal((3, 2, 3, 3)),
         rng.standard_normal(3), stride, pad)
        for h, stride, pad in ((5, 1, 1), (7, 2, 1), (1, 1, 1), (8, 3, 0))]),
    (conv_nchw_as_strided, lambda rng: [
        (rng.standard_normal((1, 2, 6, 7)).transpose(0, 1, 3, 2), rng.standard_normal(
            (2, 2, 3, 3)), rng.standard_normal(2), 2, 1)]),          # a transposed input
    (im2col_nhwc_as_strided, lambda rng: [
        (rng.standard_normal((2, h, w, 3)).astype(np.float32), 3, stride)
        for h, w, stride in ((5, 5, 1), (7, 6, 2), (3, 3, 1))]),
    (dilated_taps, lambda rng: [(rng.standard_normal(n), d) for n, d in ((9, 2), (7, 1))]),
    (rows_repeated, lambda rng: [(rng.standard_normal(4)[::-1], 3), (rng.standard_normal(5), 2)]),
], ids=["nchw", "transposed", "nhwc", "dilated", "broadcast"])
def test_as_strided_windows_from_the_arrays_own_strides_compile(model, sets):
    """The fast-conv gists' im2col: ``as_strided`` with strides computed from ``x.strides``
    (times the conv stride, a dilation, 0 for a repeated row), channels-first after
    ``np.pad`` and channels-last, on transposed and reversed inputs. They ran eagerly on
    every call (``x.strides`` of a traced array); a stride is now a step along one of the
    array's axes, whatever its layout (tracer/strided_views.py)."""
    rng = rng_for(1425)
    f = run_calls(model, sets(rng), **F32)
    assert not f.stats()["eager_calls"], f.explain()


def write_through_windows(x):
    (step,) = x.strides
    windows = as_strided(x, (x.shape[0] - 1, 2), (step, step))
    windows[0, 1] = 100.0                         # NumPy writes x[1]
    return x


def element_strides(x):
    return tuple(stride // x.itemsize for stride in x.strides)


def windows_read_after_a_write(x):
    (step,) = x.strides
    windows = as_strided(x, (x.shape[0] - 1, 2), (step, step))
    x[0] = 5.0                                    # the windows see it in NumPy
    return windows.sum(axis=1)


def strides_returned(x):
    return x.strides, {"row": x.strides[0]}


def strides_as_text(x):
    return f"{x.strides}", x * 2


@pytest.mark.parametrize("model", [write_through_windows, element_strides,
                                   windows_read_after_a_write, strides_returned,
                                   strides_as_text])
def test_as_strided_writes_and_strides_as_numbers_match_numpy(model):
    """What the strides-as-steps view does not follow runs eagerly: writes through the
    windows or into the array they view, a stride used as a number or as text, strides
    returned (NumPy's are ints of the layout)."""
    rng = rng_for(1426)
    run_calls(model, [(rng.standard_normal(n),) for n in (4, 5)], **F64)


def as_strided_conv_loss(x, w):
    return (conv_nchw_as_strided(x, w, np.zeros(w.shape[0]), 1, 1) ** 2).sum()


def test_gradient_through_as_strided_windows_matches_finite_differences():
    rng = rng_for(1427)
    x, w = rng.standard_normal((2, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    f = jitted(tj.value_and_grad(as_strided_conv_loss, argnums=(0, 1)))
    value, (dx, dw) = f(x, w)
    assert_same(value, as_strided_conv_loss(x, w), **F64)
    for array, gradient, index in ((x, dx, (1, 1, 2, 3)), (w, dw, (2, 1, 0, 2))):
        up, down = array.copy(), array.copy()
        up[index] += 1e-6
        down[index] -= 1e-6
        arguments = [(up, w), (down, w)] if array is x else [(x, up), (x, down)]
        difference = (as_strided_conv_loss(*arguments[0]) - as_strided_conv_loss(
            *arguments[1])) / 2e-6
        np.testing.assert_allclose(gradient[index], difference, rtol=1e-5)
    no_internal_errors(f)


# --- a train step: affine - batch norm - relu - dropout - affine - softmax, then Adam ------
def affine_bn_relu(x, p, bn, train):
    a = x @ p["W1"]                      # no bias: batch norm's beta is the bias (module doc)
    if train:
        mu, var = a.mean(axis=0), a.var(axis=0)
        bn["running_mean"] *= bn["momentum"]
        bn["running_mean"] += (1 - bn["momentum"]) * mu
        bn["running_var"] = bn["momentum"] * bn["running_var"] + (1 - bn["momentum"]) * var
    else:
        mu, var = bn["running_mean"], bn["running_var"]
    xhat = (a - mu) / np.sqrt(var + 1e-5)
    out = p["gamma"] * xhat + p["beta"]
    return np.maximum(0, out), (xhat, out, var)


def adam_update(p, grads, state, learning_rate):
    state["t"] += 1
    t = state["t"]
    for name in p:
        m = state.setdefault("m_" + name, np.zeros_like(p[name]))
        v = state.setdefault("v_" + name, np.zeros_like(p[name]))
        m[...] = 0.9 * m + 0.1 * grads[name]
        v[...] = 0.999 * v + 0.001 * grads[name] ** 2
        m_hat = m / (1 - 0.9 ** t)
        v_hat = v / (1 - 0.999 ** t)
        p[name] -= learning_rate * m_hat / (np.sqrt(v_hat) + 1e-8)


def bn_dropout_train_step(x, y, p, bn, state, keep):
    h, (xhat, out, var) = affine_bn_relu(x, p, bn, True)
    h = h * keep
    scores = h @ p["W2"] + p["b2"]
    shifted = scores - scores.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = x.shape[0]
    loss = -log_probs[np.arange(n), y].mean()
    dscores = np.exp(log_probs)
    dscores[np.arange(n), y] -= 1
    dscores /= n
    grads = {"W2": h.T @ dscores, "b2": dscores.sum(axis=0)}
    dout = dscores @ p["W2"].T * keep
    dout[out <= 0] = 0
    grads["gamma"] = (dout * xhat).sum(axis=0)
    grads["beta"] = dout.sum(axis=0)
    dxhat = dout * p["gamma"]
    da = (dxhat - dxhat.mean(axis=0) - xhat * (dxhat * xhat).mean(axis=0)) / np.sqrt(var + 1e-5)
    grads["W1"] = x.T @ da
    adam_update(p, grads, state, 1e-2)
    return loss


def train_step_arguments(rng, n, dtype):
    d, hidden, classes = 3, 5, 3
    p = {"W1": (rng.standard_normal((d, hidden)) * 0.5).astype(dtype),
         "gamma": np.ones(hidden, dtype), "beta": np.zeros(hidden, dtype),
         "W2": (rng.standard_normal((hidden, classes)) * 0.5).astype(dtype),
         "b2": np.zeros(classes, dtype)}
    bn = {"running_mean": np.zeros(hidden, dtype), "running_var": np.ones(hidden, dtype),
          "momentum": 0.9}
    keep = (rng.random((n, hidden)) > 0.3).astype(dtype) / dtype(0.7)   # seeded, passed in
    return (rng.standard_normal((n, d)).astype(dtype), rng.integers(0, classes, n), p, bn,
            {"t": 0}, keep)


def test_batchnorm_dropout_adam_train_step_over_batch_sizes():
    """cs231n's affine - batchnorm - relu - dropout sandwich with the dropout mask drawn
    outside (seeded) and passed in, ``dout[out <= 0] = 0``, and an Adam whose moments are
    created by ``setdefault`` in the state dict on the first step; batches of 4, 7 and 2."""
    rng = rng_for(1430)
    sets = [train_step_arguments(rng, n, np.float32) for n in (4, 7, 2)]
    f = run_calls(bn_dropout_train_step, sets, **F32)
    no_internal_errors(f)


# --- minibatches by np.array_split --------------------------------------------------------
def array_split_epoch(X, y, w, n_batches, learning_rate):
    losses = []
    for xb, yb in zip(np.array_split(X, n_batches), np.array_split(y, n_batches)):
        err = xb @ w - yb
        losses.append(float((err ** 2).sum() / max(len(xb), 1)))
        w -= learning_rate * xb.T @ err / max(len(xb), 1)
    return losses, [len(part) for part in np.array_split(y, n_batches, axis=-1)]


def test_minibatches_by_array_split_compile_over_lengths():
    """The from-scratch training loop's ``zip(np.array_split(X, k), np.array_split(y, k))``:
    batches of unequal size (10 rows in 3: 4, 3, 3), fewer rows than batches (an empty
    last batch), a length whose remainder is 0; the weights are updated in place. It ran
    eagerly on every call (np.array_split was not supported)."""
    rng = rng_for(1435)
    sets = [(rng.standard_normal((n, 3)), rng.standard_normal(n), rng.standard_normal(3), 3, 0.1)
            for n in (10, 2, 12, 10)]
    f = run_calls(array_split_epoch, sets, **F64)
    stats = f.stats()
    assert not stats["eager_calls"], f.explain()


# --- early stopping on a validation loss at the threshold ---------------------------------
def early_stopping_check(Xv, yv, w, best, patience_left):
    val_loss = np.mean((Xv @ w - yv) ** 2)
    if val_loss < best:
        return val_loss, patience_left, True
    return best, patience_left - 1, False


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_early_stopping_at_the_best_loss_and_one_ulp_either_side(dtype):
    """The patience counter of a hand-written early-stopping loop: the best loss so far is
    this epoch's validation loss exactly (a float and a NumPy scalar), one ulp above and
    one ulp below it; compiled sums round differently, so eager must decide each."""
    rng = rng_for(1440)
    Xv = rng.standard_normal((33, 17)).astype(dtype)
    yv = rng.standard_normal(33).astype(dtype)
    w = rng.standard_normal(17).astype(dtype)
    exact = early_stopping_check(Xv, yv, w, np.inf, 3)[0]
    bests = [float(exact), exact, float(np.nextafter(exact, dtype(np.inf))),
             float(np.nextafter(exact, dtype(-np.inf)))]
    f = run_calls(early_stopping_check, [(Xv, yv, w, best, 3) for best in bests],
                  **TOLERANCE[dtype])
    no_internal_errors(f)


# --- known wrong answers: masks and argmax of float32 contractions at exact ties -----------
def two_layer_net_loss(X, y, W1, b1, W2, b2):
    a = X @ W1 + b1
    h = np.maximum(0, a)
    scores = h @ W2 + b2
    scores -= scores.max(axis=1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=1, keepdims=True)
    n = X.shape[0]
    loss = -np.log(probs[np.arange(n), y]).mean()
    dscores = probs
    dscores[np.arange(n), y] -= 1
    dscores /= n
    dh = dscores @ W2.T
    dh[a <= 0] = 0
    return loss, X.T @ dh, h.T @ dscores


def mirror_template_predictions(X, template):
    scores = X @ np.stack([template, template[::-1]], axis=1)
    return scores.argmax(axis=1)


def mirror_symmetric(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    return (x + x[..., ::-1]) / 2


def test_two_layer_net_float32_relu_mask_on_mirror_symmetric_inputs():
    """cs231n's TwoLayerNet.loss in float32 on mirror-symmetric images whose first hidden
    units have antisymmetric weights (edge detectors): NumPy's ``a`` is exactly 0 or the
    rounding of a zero sum, and ``dh[a <= 0] = 0`` must zero the same rows."""
    rng = rng_for(1450)
    X = mirror_symmetric(rng, (32, 49))
    W1 = rng.standard_normal((49, 6)).astype(np.float32)
    W1[:, :3] = (W1[:, :3] - W1[::-1, :3]) / 2
    sets = [(X, rng.integers(0, 3, 32), W1, np.zeros(6, np.float32),
             rng.standard_normal((6, 3)).astype(np.float32), np.zeros(3, np.float32))]
    run_calls(two_layer_net_loss, sets, repeats=3, **F32)


def test_mirror_template_classifier_float32_predictions():
    """A linear classifier's prediction with a template and its mirror image on
    mirror-symmetric images: both scores sum the same products in opposite orders, so
    NumPy's tie (argmax picks the first) or its last-bit winner decides."""
    rng = rng_for(1451)
    X = mirror_symmetric(rng, (64, 49))
    template = rng.standard_normal(49).astype(np.float32)
    run_calls(mirror_template_predictions, [(X, template)], repeats=3, **F32)


def einsum_conv_relu_backward(X, W, dout):
    a = conv2d_nhwc_same(X, W, 1)
    da = dout * (a > 0)
    padded = np.pad(X, ((0, 0), (1, 1), (1, 1), (0, 0)))
    dW = np.einsum("nhwcij,nhwf->ijcf", sliding_window_view(padded, (3, 3), axis=(1, 2)), da)
    return np.maximum(a, 0), da, dW


def test_einsum_conv_float32_relu_mask_with_antisymmetric_filters():
    """A channels-last einsum convolution (gists' ``np.einsum('nhwcij,ijcf->nhwf', ...)``)
    with left-right antisymmetric filters on mirror-symmetric images: the responses are 0
    in exact arithmetic, and the relu backward mask ``dout * (a > 0)`` must be NumPy's (it
    was unchecked: NumPy's einsum sums in its own loops, compiled code as a product, so
    exact zeros came out as either sign)."""
    rng = rng_for(1452)
    X = rng.standard_normal((4, 9, 9, 3)).astype(np.float32)
    X = (X + X[:, :, ::-1]) / 2                   # mirror-symmetric across the width
    W = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    W = (W - W[:, ::-1]) / 2
    run_calls(einsum_conv_relu_backward, [(X, W, np.ones((4, 9, 9, 4), np.float32))],
              repeats=2, **F32)
