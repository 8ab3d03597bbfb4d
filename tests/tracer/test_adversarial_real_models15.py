"""Adversarial real-model tests, round 15a: classic machine-learning and scientific NumPy
code from corners rounds 1-14 did not reach, written in the idioms of public code and run
eagerly and through ``jit`` on copies of the same arguments: STFT framing by
``as_strided`` over ``x.strides[0] * hop`` (librosa's ``util.frame`` and its many gists,
``np.fft`` after it).

Fixed while this round ran (their tests are regressions): a stride taken by subscript,
``x.strides[0] * hop``, made every call run eagerly ('x.strides ... outlives the trace'):
only the whole ``x.strides`` tuple was known as the trace's own, and a single stride read
through the argument's path was remembered as an outside object, which kept it alive.
"""

import numpy as np
from numpy.lib.stride_tricks import as_strided
from real_model_checks import all_compiled, no_internal_errors, run_calls

F64 = dict(rtol=1e-9, atol=1e-9)
F32 = dict(rtol=1e-4, atol=1e-5)


# --- STFT frames by stride tricks (librosa util.frame, audio gists) ---------------------------
def frame_signal(x, frame_length=8, hop=4):
    """Overlapping frames of a 1-D signal as a strided view, windowed by a Hann window."""
    n_frames = 1 + (len(x) - frame_length) // hop
    frames = as_strided(x, shape=(n_frames, frame_length),
                        strides=(x.strides[0] * hop, x.strides[0]))
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(frame_length) / frame_length)
    return frames * window


def power_spectrogram(x, frame_length=8, hop=4):
    frames = frame_signal(x, frame_length, hop)
    return np.abs(np.fft.rfft(frames, axis=1)) ** 2


def test_stft_frames_by_a_stride_of_x_strides_compile():
    """Lengths that leave a remainder, the shortest signal with one frame, a strided
    (non-contiguous) signal, float32, and NaN/Inf samples. Before the fix every call ran
    eagerly: ``x.strides[0]`` was kept as an outside object and outlived the trace."""
    rng = np.random.default_rng(15)
    signals = [rng.standard_normal(32), rng.standard_normal(37), rng.standard_normal(8),
               rng.standard_normal(58)[::2], np.array([1.0, np.nan, np.inf, -np.inf] * 4)]
    f = run_calls(frame_signal, [(x,) for x in signals], **F64)
    no_internal_errors(f)
    assert all_compiled(f, 2 * len(signals)), f.explain()
    g = run_calls(frame_signal, [(x.astype(np.float32),) for x in signals[:3]], **F32)
    assert all_compiled(g, 6), g.explain()


def test_stft_with_np_fft_runs_eagerly_and_says_why():
    """np.fft is not traced: the spectrogram is NumPy's, and explain() names the call."""
    rng = np.random.default_rng(16)
    f = run_calls(power_spectrogram, [(rng.standard_normal(32),), (rng.standard_normal(21),)],
                  **F64)
    no_internal_errors(f)
    assert "np.fft.rfft" in f.explain(), f.explain()
