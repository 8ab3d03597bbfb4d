"""Findings of round 18c (hostile inputs for the newest features: data-dependent loop exits,
random draws, loops writing through a carried view; bad inputs, the disk cache): each a
minimal program or case, eager NumPy against ``jit``, or the cache and its command against
what a user is promised.
"""

import io

import numpy as np

import tracejit as tj
from tracejit.runtime import cli


# --- the cache command on entries holding captured loops --------------------------------
def halve_until_small(x):
    y = x.copy()
    while np.abs(y).sum() > 1.0:
        y = y / 3.0
    return y


def run_command(*argv):
    out = io.StringIO()
    status = cli.main(list(argv), out)
    return status, out.getvalue()


def test_the_cache_command_reads_entries_of_programs_with_loops(tmp_path, monkeypatch):
    """A program with a captured loop is stored as its IR plus pieces, each with its own
    kernels and object code (``serialize._loop_program_to_json``). ``tracejit cache verify``
    looked for one object code in the program and called every such entry corrupt ('object',
    exit status 1); ``cache show`` raised KeyError 'kernels'."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    f = tj.jit(halve_until_small, cache=True)
    for _ in range(2):
        x = np.arange(1.0, 6.0) * 10
        np.testing.assert_allclose(f(x), halve_until_small(x))
    assert f.stats()["compiled_calls"] >= 1, f.explain()
    status, text = run_command("cache", "verify", "--cache-dir", str(tmp_path))
    assert status == 0 and "corrupt" not in text and "1 of 1 entries ok" in text, text
    for flags in ([], ["--ir", "--guards", "--source"], ["--llvm", "--asm"]):
        status, text = run_command("cache", "show", "halve_until_small", *flags,
                                   "--cache-dir", str(tmp_path))
        assert status == 0 and "kernel(s): k" in text, text
    status, text = run_command("cache", "show", "halve_until_small", "--json",
                               "--cache-dir", str(tmp_path))
    assert status == 0 and '"kernels": [' in text and '"name": "k' in text, text
