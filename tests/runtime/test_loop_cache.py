"""Programs with a captured loop in the disk cache: a second process warm-starts an RNN
from disk (no tracing, no LLVM) and gets eager's results for every length in the bucket;
a forged or corrupt entry for a loop program is refused and rebuilt, and a payload
signed with the right key stays data (the attack patterns of ``test_cache_attacks``).

Every process is a real ``python`` subprocess running ``model.py`` written into a
temporary folder; its results are compared here with the same NumPy code run eagerly.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest

from tracejit.runtime import cache_trust
from tracejit.runtime.cache import MAGIC, _parse_entry
from tracejit.runtime.cache_trust import SECRET_NAME, TrustedRoot
from tracejit.testing import compare_results

PROGRAM = textwrap.dedent('''\
    """Runs the RNN for each length in argv[1]; prints results, stats and LLVM compiles."""
    import json
    import sys

    import numpy as np

    from tracejit import codegen
    import tracejit.codegen.llvm
    from tracejit import jit

    compiles = []
    _compile_module = tracejit.codegen.llvm.compile_module


    def counted(*args, **kwargs):
        compiles.append(1)
        return _compile_module(*args, **kwargs)


    tracejit.codegen.llvm.compile_module = counted


    def rnn(x, Wx, Wh, b, h0):
        N, T, D = x.shape
        h = h0
        h_all = np.zeros((N, T, Wh.shape[0]), dtype=x.dtype)
        for t in range(T):
            h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
            h_all[:, t, :] = h
        return h_all


    model = jit(rnn, dynamic=True)
    N, D, H = 3, 5, 6
    rng = np.random.default_rng(0)
    params = (rng.standard_normal((D, H)), rng.standard_normal((H, H)) * 0.4,
              rng.standard_normal(H), rng.standard_normal((N, H)))
    results = []
    for length in json.loads(sys.argv[1]):
        x = np.random.default_rng(length).standard_normal((N, length, D))
        results.append(model(x, *params).tolist())
    (variant,) = model._variants
    steps = variant.root.program.steps
    print(json.dumps({"results": results, "stats": model.stats(),
                      "llvm_compiles": len(compiles),
                      "native_loops": [step.native is not None for step in steps
                                       if hasattr(step, "native")]}))
''')

LENGTHS = [9, 16, 11, 13]  # one bucket of T (9..16): one entry


def eager(length):
    def rnn(x, Wx, Wh, b, h0):
        h = h0
        h_all = np.zeros((x.shape[0], x.shape[1], Wh.shape[0]), dtype=x.dtype)
        for t in range(x.shape[1]):
            h = np.tanh(x[:, t, :] @ Wx + h @ Wh + b)
            h_all[:, t, :] = h
        return h_all

    N, D, H = 3, 5, 6
    rng = np.random.default_rng(0)
    params = (rng.standard_normal((D, H)), rng.standard_normal((H, H)) * 0.4,
              rng.standard_normal(H), rng.standard_normal((N, H)))
    x = np.random.default_rng(length).standard_normal((N, length, D))
    return rnn(x, *params)


class Project:
    def __init__(self, folder):
        self.folder = folder
        self.cache_dir = folder / "cache"
        self.marker = folder / "PAYLOAD-RAN"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.py").write_text(PROGRAM)

    def run(self, lengths=LENGTHS):
        env = {key: value for key, value in os.environ.items()
               if key not in ("TRACEJIT_DISABLE", "TRACEJIT_LOG")}
        env.update(TRACEJIT_CACHE_DIR=str(self.cache_dir), PYTHONDONTWRITEBYTECODE="1")
        completed = subprocess.run([sys.executable, "model.py", json.dumps(lengths)],
                                   cwd=self.folder, env=env, capture_output=True, text=True,
                                   timeout=180)
        assert completed.returncode == 0 and "Traceback" not in completed.stderr, \
            completed.stderr
        report = json.loads(completed.stdout)
        for length, result in zip(lengths, report["results"]):
            problem = compare_results(np.asarray(result), eager(length))
            assert problem is None, f"T={length}: {problem}"
        assert not self.marker.exists(), "a payload from the cache ran"
        report["stderr"] = completed.stderr
        return report

    def entries(self):
        return sorted(self.cache_dir.glob("v1/*/*.tjc"))

    def secret(self):
        return (self.cache_dir / SECRET_NAME).read_bytes()


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    project = Project(tmp_path_factory.mktemp("loop-cache") / "project")
    report = project.run()
    assert report["stats"]["compiles"] == 1 and report["llvm_compiles"] > 0, report
    assert len(project.entries()) == 1
    return project


@pytest.fixture
def project(filled):
    """The same project with a fresh copy of the filled cache."""
    cache_trust.TrustedRoot.forget()
    copy = Project(filled.folder)
    copy.cache_dir = filled.folder / "cache-copy"
    shutil.rmtree(copy.cache_dir, ignore_errors=True)
    shutil.copytree(filled.cache_dir, copy.cache_dir, symlinks=True)
    yield copy
    shutil.rmtree(copy.cache_dir, ignore_errors=True)
    copy.marker.unlink(missing_ok=True)


def test_a_second_process_warm_starts_the_loop_from_disk(project):
    report = project.run(LENGTHS + [10, 15])
    stats = report["stats"]
    assert (stats["compiles"], stats["disk_hits"], stats["traced_calls"]) == (0, 1, 0), stats
    assert report["llvm_compiles"] == 0  # no LLVM at all: pieces and pool from disk
    assert report["native_loops"] == [True]  # the loop's native driver came along
    assert stats["compiled_calls"] == len(LENGTHS) + 2


def test_the_entry_holds_the_loop_program_as_pieces(project):
    (entry,) = project.entries()
    _, body = unpack(entry)
    program = body["variant"]["paths"][0]["program"]
    assert program["kind"] == "loops" and "loop(" in program["graph"]
    names = [piece["name"] for piece in program["pieces"]]
    assert any("_loop0" in name for name in names) and any("_segment" in name for name in names)


# --- forged and corrupt entries (see test_cache_attacks for the general set) --------------
def unpack(path):
    content = path.read_bytes()[: -cache_trust.TAG_BYTES]
    return _parse_entry(str(path), content)


def pack(header, body, secret=None):
    blobs = body.pop("blobs")
    body["blob_sizes"] = [len(blob) for blob in blobs]
    body_bytes = json.dumps(body, sort_keys=True).encode()
    payload = zlib.compress(struct.pack("<Q", len(body_bytes)) + body_bytes + b"".join(blobs))
    header_bytes = json.dumps(header, sort_keys=True).encode()
    content = MAGIC + struct.pack("<Q", len(header_bytes)) + header_bytes + payload
    if secret is None:
        return content + bytes(cache_trust.TAG_BYTES)
    return content + TrustedRoot("unused", secret).tag(header["key"], content)


def _loop_program(body):
    return body["variant"]["paths"][0]["program"]


def _body_piece(body):
    return next(piece for piece in _loop_program(body)["pieces"] if "_loop" in piece["name"])


def _marker(project):
    return f"__import__('pathlib').Path({str(project.marker)!r}).touch()"


def _body_wrapper(project, body):
    _body_piece(body)["wrapper"] = (f"import pathlib\npathlib.Path({str(project.marker)!r})"
                                    ".touch()\ndef run(*a):\n    return ()\n")


def _index_symbol(project, body):
    """The loop index renamed to code the body's wrapper would paste as a parameter."""
    piece = _body_piece(body)
    piece["graph"] = piece["graph"].replace("i0", f"i0=({_marker(project)})")


def _top_graph_index(project, body):
    program = _loop_program(body)
    program["graph"] = program["graph"].replace("i0", f"i0 or {_marker(project)}")


def _pieces_swapped(project, body):
    program = _loop_program(body)
    program["pieces"] = program["pieces"][::-1]


def _piece_dropped(project, body):
    _loop_program(body)["pieces"].pop()


def _piece_kind(project, body):
    _body_piece(body)["kind"] = "loops"


def _trusted_flag(project, body):
    _body_piece(body)["trusted"] = _marker(project)


def _driver_layout(project, body):
    """A driver said to be built for other slots: the loop must not run it."""
    _body_piece(body)["driver"] = _body_piece(body)["driver"].replace("slots=", "slots=1")


def _exported_name(project, body):
    _body_piece(body)["exports"] = ["PyRun_SimpleString"]


def _body_object(project, body):
    body["blobs"][_body_piece(body)["object"]] = b"\x7fELF" + b"\xcc" * 4096


PAYLOADS = {
    "body wrapper source": _body_wrapper,
    "index symbol in the body's IR": _index_symbol,
    "index symbol in the loop's IR": _top_graph_index,
    "pieces in another order": _pieces_swapped,
    "a piece missing": _piece_dropped,
    "a piece that claims to hold loops": _piece_kind,
    "trusted flag": _trusted_flag,
    "driver layout": _driver_layout,
    "exported name": _exported_name,
}


@pytest.mark.parametrize("signer", ["another cache's key", "no signature"])
@pytest.mark.parametrize("payload", [*PAYLOADS, "swapped body object code"])
def test_a_forged_loop_entry_is_rejected_and_rebuilt(project, payload, signer):
    (entry,) = project.entries()
    header, body = unpack(entry)
    (PAYLOADS.get(payload) or _body_object)(project, body)
    forged = pack(header, body, os.urandom(32) if signer == "another cache's key" else None)
    if signer == "no signature":
        forged = forged[: -cache_trust.TAG_BYTES]
    entry.write_bytes(forged)
    report = project.run()
    assert (report["stats"]["compiles"], report["stats"]["disk_hits"]) == (1, 0)
    assert "cannot be trusted" in report["stderr"]


@pytest.mark.parametrize("payload", list(PAYLOADS))
def test_a_loop_payload_signed_with_the_right_key_is_still_only_data(project, payload):
    """Defence in depth: signed right, yet no field becomes code, no result is wrong
    (``run`` checks both) and the entry is not used."""
    (entry,) = project.entries()
    header, body = unpack(entry)
    PAYLOADS[payload](project, body)
    entry.write_bytes(pack(header, body, project.secret()))
    report = project.run()
    assert report["stats"]["disk_hits"] == 0, payload
    assert report["stats"]["compiles"] == 1


def test_a_truncated_loop_entry_is_rebuilt_and_rewritten(project):
    (entry,) = project.entries()
    entry.write_bytes(entry.read_bytes()[: len(entry.read_bytes()) // 2])
    report = project.run()
    assert (report["stats"]["compiles"], report["stats"]["disk_hits"]) == (1, 0)
    assert project.run()["stats"]["disk_hits"] == 1  # rewritten whole
