"""A program loaded from the disk cache keeps its LLVM IR compressed until something reads
it (``lower``, ``tracejit cache show --llvm``): a warm start never does, and inflating
~280 KB of IR text with every entry cost it ~0.9 ms. Read, it is the text the compiling
process had."""

from __future__ import annotations

import numpy as np
import pytest

from tracejit import jit
from tracejit.runtime import serialize


def model(x, w):
    return np.tanh(x @ w) * 2.0 + 1.0


def test_a_loaded_programs_ir_is_inflated_when_read_and_equal(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((6, 5)), rng.standard_normal((5, 3))
    compiling = jit(model)
    compiling(x, w)  # traced: the trace's own result
    expected = compiling(x, w)  # the compiled program's
    original = compiling._variants[0].root.program
    loading = jit(model)
    np.testing.assert_array_equal(loading(x, w), expected)
    assert loading.stats()["disk_hits"] == 1 and loading.stats()["compiles"] == 0
    program = loading._variants[0].root.program
    assert callable(program.__dict__["_optimized_ir_text"])  # not inflated by the load
    assert program.optimized_ir == original.optimized_ir
    assert program.llvm_ir == original.llvm_ir
    assert isinstance(program.__dict__["_optimized_ir_text"], str)  # inflated once
    assert "define" in loading.lower(x, w).llvm_ir


@pytest.mark.parametrize("field", [{"deflated": 5}, {"deflated": "0"}, "text", {}])
def test_a_malformed_text_field_is_refused_at_load(field):
    with pytest.raises(serialize.InvalidEntry):
        serialize._inflater(field, serialize.Blobs([b"x"]), "LLVM IR")


def test_a_text_that_does_not_inflate_is_an_invalid_entry():
    with pytest.raises(serialize.InvalidEntry):
        serialize.stored_text({"deflated": 0}, [b"not zlib"])
    import zlib

    cut = zlib.compress(b"define void @f() { ret void }")[:-6]
    with pytest.raises(serialize.InvalidEntry):
        serialize.stored_text({"deflated": 0}, [cut])
    assert serialize.stored_text({"deflated": 0}, [zlib.compress(b"ir")]) == "ir"
