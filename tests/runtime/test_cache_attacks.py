"""Attacks on the disk cache: whoever can write files where a program keeps its compile
cache must not make it run their code, return a wrong result, hang or crash.

Each trial changes a cache a real program filled, runs the program again in a fresh
interpreter, and checks its results against NumPy (a wrong result is a failure), that it
exited cleanly within the time limit (a crash or hang is a failure) and that no payload
ran (each payload would create a marker file). The attacks:

* forged entries: metadata whose fields carry Python code (the wrapper, symbol names, a
  shape guard's operator, a guarded length, a dtype), swapped object code, an entry copied
  to another key, entries signed with another cache's key or not signed at all; and, as
  defence in depth, the same metadata payloads signed with the *right* key (the user
  re-signed a cache they should not have): parsed as data, rejected, never executed;
* files: an entry that is a symlink, a FIFO, a symlink to /dev/zero, a 1 GiB sparse file;
* roots: world-writable, owned by another user, reached through another user's symlink,
  under a world-writable parent, with a readable signing key;
* temp files left by killed writers, and processes writing the same key at once.

``TALLY`` counts trials, wrong results and crashes; the last test prints and checks it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from tracejit.runtime import cache_trust, cli
from tracejit.runtime.cache import MAGIC, _parse_entry
from tracejit.runtime.cache_trust import SECRET_NAME, TrustedRoot
from tracejit.tracer.ir import Effect

TALLY = {"trials": 0, "wrong results": 0, "crashes": 0, "payloads run": 0}

PROGRAM = textwrap.dedent('''\
    """Calls ``model`` on the arrays given as JSON in argv[1]; prints results and stats."""
    import json
    import os
    import sys
    import time

    import numpy as np

    from tracejit import jit

    GAIN = [1.0, 2.0, 3.0]


    def scale(x):
        return x * 2.0


    @jit(dynamic=True)
    def model(x):
        if len(GAIN) == 3 and x.shape[0] > 2:
            return scale(x) + 1.0 + np.float64(0.5)
        return x - 1.0


    time.sleep(max(0.0, float(os.environ.get("START_AT", "0")) - time.time()))
    inputs = [np.asarray(values, dtype=np.float64) for values in json.loads(sys.argv[1])]
    print(json.dumps({"results": [model(x).tolist() for x in inputs],
                      "stats": model.stats()}))
''')

INPUTS = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]  # one bucket: one entry


def expected(values):
    x = np.asarray(values, dtype=np.float64)
    return (x * 2.0 + 1.5).tolist() if x.shape[0] > 2 else (x - 1.0).tolist()


class Program:
    """The user's program in ``folder``, its cache in ``folder/cache``."""

    def __init__(self, folder):
        self.folder = folder
        self.cache_dir = folder / "cache"
        self.marker = folder / "PAYLOAD-RAN"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.py").write_text(PROGRAM)

    def env(self, **extra):
        env = {key: value for key, value in os.environ.items()
               if key not in ("TRACEJIT_DISABLE", "TRACEJIT_LOG")}
        env.update(TRACEJIT_CACHE_DIR=str(self.cache_dir), PYTHONDONTWRITEBYTECODE="1")
        env.update(extra)
        return env

    def command(self, inputs=INPUTS):
        return [sys.executable, "model.py", json.dumps(inputs)]

    def run(self, inputs=INPUTS, timeout=60):
        """One trial: the report, with ``stderr``; tallies wrong results and crashes."""
        TALLY["trials"] += 1
        try:
            completed = subprocess.run(self.command(inputs), cwd=self.folder, env=self.env(),
                                       capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            TALLY["crashes"] += 1
            raise AssertionError("the program hung") from None
        if completed.returncode != 0 or "Traceback" in completed.stderr:
            TALLY["crashes"] += 1
            raise AssertionError(completed.stderr)
        report = json.loads(completed.stdout)
        if report["results"] != [expected(values) for values in inputs]:
            TALLY["wrong results"] += 1
            raise AssertionError(f"wrong results: {report['results']}")
        if self.marker.exists():
            TALLY["payloads run"] += 1
            raise AssertionError("a payload from the cache ran")
        report["stderr"] = completed.stderr
        return report

    def entries(self):
        return sorted(self.cache_dir.glob("v1/*/*.tjc"))

    def secret(self):
        return (self.cache_dir / SECRET_NAME).read_bytes()


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A program whose cache holds its entry (compiled once, for every test's copy)."""
    program = Program(tmp_path_factory.mktemp("attacks") / "program")
    report = program.run()
    assert report["stats"]["compiles"] == 1 and len(program.entries()) == 1
    return program


@pytest.fixture
def program(filled):
    """The same program (its file is part of the key) with a fresh copy of the cache."""
    cache_trust.TrustedRoot.forget()
    shutil.rmtree(filled.cache_dir.parent / "cache-copy", ignore_errors=True)
    copy = Program(filled.folder)
    copy.cache_dir = filled.folder / "cache-copy"
    shutil.copytree(filled.cache_dir, copy.cache_dir, symlinks=True)
    copy.marker.unlink(missing_ok=True)
    yield copy
    shutil.rmtree(copy.cache_dir, ignore_errors=True)
    copy.marker.unlink(missing_ok=True)


def assert_rebuilt(report):
    """The tampered entry was not used: the program compiled again."""
    assert (report["stats"]["compiles"], report["stats"]["disk_hits"]) == (1, 0), report


# --- entries: unpacking, changing and packing them as an attacker would -------------------
def unpack(path):
    """``(header, body)`` of an entry, without checking its signature."""
    content = path.read_bytes()[: -cache_trust.TAG_BYTES]
    return _parse_entry(str(path), content)


def pack(header, body, secret=None, key=None):
    """Entry bytes; signed with ``secret`` (any key) or given a made-up tag."""
    blobs = body.pop("blobs")
    body["blob_sizes"] = [len(blob) for blob in blobs]
    body_bytes = json.dumps(body, sort_keys=True).encode()
    payload = zlib.compress(struct.pack("<Q", len(body_bytes)) + body_bytes + b"".join(blobs))
    header_bytes = json.dumps(header, sort_keys=True).encode()
    content = MAGIC + struct.pack("<Q", len(header_bytes)) + header_bytes + payload
    if secret is None:
        return content + bytes(32)
    return content + TrustedRoot("unused", secret).tag(key or header["key"], content)


def _marker_code(program):
    return f"__import__('pathlib').Path({str(program.marker)!r}).touch()"


def _wrapper_payload(program, body):
    program_json = body["variant"]["paths"][0]["program"]
    program_json["wrapper"] = (f"import pathlib\npathlib.Path({str(program.marker)!r}).touch()\n"
                               "def run(*a):\n    return ()\n")


def _symbol_payload(program, body):
    spec = body["variant"]["spec"]
    evil = f"s0 or {_marker_code(program)}"
    # every symbol renamed to the payload (one key: the forged entry's single symbol)
    spec["symbols"] = {evil: bounds for bounds in spec["symbols"].values()}  # noqa: B035
    for leaf in spec["leaves"]:
        if leaf["kind"] == "array":
            leaf["shape"] = [evil if isinstance(dim, str) else dim for dim in leaf["shape"]]


def _shape_guard_payload(program, body):
    spec = body["variant"]["spec"]
    spec["shape_guards"].append({"lhs": "s0", "op": f"== 0 or {_marker_code(program)} or 1 ==",
                                 "rhs": "s0", "expected": True, "reason": "x",
                                 "location": None})


def _length_payload(program, body):
    for item in body["variant"]["spec"]["outside"]:
        if item["kind"] == "len":
            item["value"][1] = f"3 or {_marker_code(program)}"
            return
    raise AssertionError("the program's entry has no length guard")


def _bucket_payload(program, body):
    spec = body["variant"]["spec"]
    for name in spec["symbols"]:
        spec["symbols"][name] = [f"0 or {_marker_code(program)}", 100]


def _dtype_payload(program, body):
    for leaf in body["variant"]["spec"]["leaves"]:
        if leaf["kind"] == "array":
            leaf["dtype"] = "|O"


def _static_result_payload(program, body):
    outputs = body["variant"]["paths"][0]["outputs"]
    outputs["leaves"] = [["static", [99.0, 99.0, 99.0]]]


def _graph_payload(program, body):
    program_json = body["variant"]["paths"][0]["program"]
    program_json["graph"] = program_json["graph"].replace("multiply", "subtract")


def _ir_symbol_payload(program, body):
    """A symbol the wrapper generator would write into Python text as a name."""
    program_json = body["variant"]["paths"][0]["program"]
    program_json["graph"] = program_json["graph"].replace("s0", "__import__")


def _object_payload(program, body):
    index = body["variant"]["paths"][0]["program"]["object"]
    body["blobs"][index] = b"\x7fELF" + b"\xcc" * 4096  # traps if it were ever run


METADATA_PAYLOADS = {
    "wrapper source": _wrapper_payload,
    "symbol name": _symbol_payload,
    "shape guard operator": _shape_guard_payload,
    "guarded length": _length_payload,
    "bucket bound": _bucket_payload,
    "object dtype": _dtype_payload,
    "static result": _static_result_payload,
    "changed IR": _graph_payload,
    "IR symbol name": _ir_symbol_payload,
}


@pytest.mark.parametrize("signer", ["another cache's key", "no signature", "a made-up tag"])
@pytest.mark.parametrize("payload", [*METADATA_PAYLOADS, "swapped object code"])
def test_a_forged_entry_is_rejected_and_rebuilt(program, payload, signer):
    (entry,) = program.entries()
    header, body = unpack(entry)
    (METADATA_PAYLOADS.get(payload) or _object_payload)(program, body)
    secret = {"another cache's key": os.urandom(32), "no signature": None,
              "a made-up tag": None}[signer]
    forged = pack(header, body, secret)
    if signer == "no signature":
        forged = forged[:-32]
    entry.write_bytes(forged)
    report = program.run()
    assert_rebuilt(report)
    assert "cannot be trusted" in report["stderr"]


@pytest.mark.parametrize("payload", list(METADATA_PAYLOADS))
def test_a_payload_signed_with_the_right_key_is_still_only_data(program, payload):
    """Defence in depth: the signature is right (the user re-signed a cache they should
    not have), yet no field becomes code and no wrong result comes back."""
    (entry,) = program.entries()
    header, body = unpack(entry)
    METADATA_PAYLOADS[payload](program, body)
    entry.write_bytes(pack(header, body, program.secret()))
    report = program.run()  # right results, no payload ran
    if payload != "changed IR":
        assert report["stats"]["disk_hits"] == 0, payload
    # "changed IR" is a well-typed lie about an op; the native code is the authority (the
    # wrapper, rebuilt from the IR, still matches), so the result is right either way.


def test_the_wrapper_generator_only_sees_checked_ir():
    """Names and effect parameters of parsed IR are written into the wrapper's Python
    text, so a graph whose symbol or print stream is not tracejit's is refused."""
    from tracejit.runtime import serialize
    from tracejit.tracer.ir import parse_graph

    text = textwrap.dedent("""\
        graph g
          symbols s0 in [3, 4]
          in %0: f64[s0]
          %1: f64[s0] = multiply(%0, 2)
          return %1
    """)
    serialize.check_graph(parse_graph(text))
    for evil in (text.replace("s0", "__import__"),
                 text.replace("symbols s0 in [3, 4]", "symbols s0 in [3, 4], "
                              "s1 in [1, 2]").replace("f64[s0]", "f64[s0 + q]")):
        with pytest.raises((serialize.InvalidEntry, ValueError)):
            serialize.check_graph(parse_graph(evil))
    graph = parse_graph(text)
    effect = Effect("print", (), (("end", "\n"), ("segments", ()), ("sep", " "),
                                  ("stream", "stdout, __import__('os')")))
    with pytest.raises(serialize.InvalidEntry, match="print"):
        serialize.check_graph(dataclasses.replace(graph, body=(*graph.body, effect)))


def test_an_entry_copied_to_another_key_is_rejected(program, filled):
    """A valid entry for one signature, copied to the name of another: its signature binds
    it to its own key."""
    (entry,) = program.entries()
    header, body = unpack(entry)
    impostor_key = "0" * 64
    impostor = program.cache_dir / "v1" / "00" / f"{impostor_key}.tjc"
    impostor.parent.mkdir(mode=0o700, exist_ok=True)
    shutil.copyfile(entry, impostor)
    status, output = verify(program.cache_dir)
    assert status == 1 and "its signature does not match" in output
    header["key"] = impostor_key  # even with the header changed to match
    impostor.write_bytes(pack(header, body, secret=os.urandom(32)))
    status, _ = verify(program.cache_dir)
    assert status == 1
    assert program.run()["stats"]["disk_hits"] == 1  # the real entry still loads


def test_an_entry_from_another_cache_is_rejected_until_resigned(program, tmp_path):
    """Copying entries between caches (another user's, another machine's) does not carry
    trust; ``tracejit cache resign --yes`` is the explicit way to take them over."""
    other = Program(program.folder)
    other.cache_dir = tmp_path / "other-cache"
    other.cache_dir.mkdir(mode=0o700)
    shutil.copytree(program.cache_dir / "v1", other.cache_dir / "v1")  # not the key
    assert_rebuilt(other.run())
    shutil.copytree(program.cache_dir / "v1", other.cache_dir / "v1", dirs_exist_ok=True)
    refused = subprocess.run([sys.executable, "-m", "tracejit", "cache", "resign",
                              "--cache-dir", str(other.cache_dir)], capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 1 and "--yes" in refused.stderr
    resigned = subprocess.run([sys.executable, "-m", "tracejit", "cache", "resign", "--yes",
                               "--cache-dir", str(other.cache_dir)], capture_output=True,
                              text=True, timeout=60)
    assert resigned.returncode == 0, resigned.stdout + resigned.stderr
    assert "signed" in resigned.stdout
    assert verify(other.cache_dir)[0] == 0
    assert other.run()["stats"]["disk_hits"] == 1


def test_an_old_unsigned_entry_is_rebuilt(program):
    """TJC1 entries (an unkeyed sha256 anyone could recompute) are not trusted."""
    import hashlib

    (entry,) = program.entries()
    content = entry.read_bytes()[:-32].replace(MAGIC, b"TJC1\n", 1)
    entry.write_bytes(content + hashlib.sha256(content).digest())
    assert_rebuilt(program.run())


# --- files that are not entries ------------------------------------------------------------
def _symlink_to_other_entry(program, entry):
    target = program.folder / "elsewhere.tjc"
    shutil.copyfile(entry, target)
    entry.unlink()
    entry.symlink_to(target)


def _fifo(program, entry):
    entry.unlink()
    os.mkfifo(entry, 0o600)


def _dev_zero(program, entry):
    entry.unlink()
    entry.symlink_to("/dev/zero")


def _huge_sparse_file(program, entry):
    with open(entry, "r+b") as stream:
        stream.truncate(cache_trust.MAX_FILE_BYTES + 1)


def _world_writable_entry(program, entry):
    entry.chmod(0o666)


FILES = {"symlink": _symlink_to_other_entry, "fifo": _fifo, "/dev/zero": _dev_zero,
         "1 GiB sparse": _huge_sparse_file, "world-writable file": _world_writable_entry}


@pytest.mark.parametrize("kind", list(FILES))
def test_an_entry_that_is_not_a_private_regular_file_is_neither_read_nor_waited_on(
        program, kind):
    (entry,) = program.entries()
    FILES[kind](program, entry)
    started = time.perf_counter()
    status, output = verify(program.cache_dir)  # in this process: must not hang either
    assert status == 1 and str(entry) in output, output
    listed = io.StringIO()
    assert cli.main(["cache", "list", "--cache-dir", str(program.cache_dir)], out=listed) == 0
    assert "<corrupt entry>" in listed.getvalue()
    assert time.perf_counter() - started < 20
    report = program.run(timeout=60)
    assert_rebuilt(report)
    assert stat.S_ISREG(os.lstat(entry).st_mode)  # replaced by a fresh, signed entry
    assert verify(program.cache_dir)[0] == 0


def test_the_runtime_objects_are_signed_too(program):
    objects = sorted(program.cache_dir.glob("v1/runtime-*.o"))
    assert len(objects) == 2  # the thread pool's runtime, the entry guards' array check
    for runtime_object in objects:
        runtime_object.write_bytes(b"\xcc" * 1000 + runtime_object.read_bytes()[-32:])
    program.run()
    for runtime_object in objects:  # each rebuilt and rewritten
        assert runtime_object.read_bytes()[:1000] != b"\xcc" * 1000


# --- roots ---------------------------------------------------------------------------------
def _refused_run(program):
    report = program.run()
    assert "refusing the compile cache" in report["stderr"], report["stderr"]
    assert report["stderr"].count("refusing the compile cache") == 1  # one warning
    assert report["stats"]["disk_hits"] == 0 and report["stats"]["compiles"] == 1
    return report


def _as_other_user(path, follow=True):
    """Give ``path`` to uid 12345 (we run tests as root; skip where we cannot)."""
    if os.geteuid() != 0:
        pytest.skip("chown needs root; the in-process tests cover this with a fake uid")
    (os.chown if follow else os.lchown)(path, 12345, 12345)


def test_a_world_writable_root_is_refused_and_nothing_is_written(program):
    program.cache_dir.chmod(0o777)
    before = sorted(program.cache_dir.rglob("*"))
    _refused_run(program)
    assert sorted(program.cache_dir.rglob("*")) == before
    status = subprocess.run([sys.executable, "-m", "tracejit", "cache", "list", "--cache-dir",
                             str(program.cache_dir)], capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 1 and "other users can write to it" in status.stderr


def test_a_root_owned_by_another_user_is_refused(program):
    _as_other_user(program.cache_dir)
    _refused_run(program)


def test_a_root_reached_through_another_users_symlink_is_refused(program, tmp_path):
    link = tmp_path / "link-to-cache"
    link.symlink_to(program.cache_dir)
    _as_other_user(link, follow=False)
    program.cache_dir, real = link, program.cache_dir
    try:
        _refused_run(program)
    finally:
        program.cache_dir = real


def test_a_root_reached_through_the_users_own_symlink_is_used(program, tmp_path):
    link = tmp_path / "my-link"
    link.symlink_to(program.cache_dir)
    program.cache_dir = link
    assert program.run()["stats"]["disk_hits"] == 1


def test_a_root_under_a_world_writable_parent_without_sticky_bit_is_refused(program, tmp_path):
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(0o777)
    moved = parent / "cache"
    shutil.move(program.cache_dir, moved)
    program.cache_dir = moved
    _refused_run(program)


def test_a_signing_key_others_can_read_is_refused(program):
    (program.cache_dir / SECRET_NAME).chmod(0o644)
    _refused_run(program)


def test_a_new_root_is_private(tmp_path):
    program = Program(tmp_path / "fresh")
    program.cache_dir = tmp_path / "a" / "b" / "cache"
    program.run()
    for path in [program.cache_dir, *program.cache_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


@pytest.mark.parametrize("problem", ["owner", "symlink owner"])
def test_ownership_checks_with_a_fake_uid(tmp_path, monkeypatch, problem):
    """The same checks without root: the process pretends to be another user."""
    root = tmp_path / "cache"
    TrustedRoot.forget()
    TrustedRoot.open(root, create=True)
    TrustedRoot.forget()
    target = root
    if problem == "symlink owner":
        target = tmp_path / "link"
        target.symlink_to(root)
        real_lstat = os.lstat

        def lstat(path, *args, **kwargs):  # the link as if another user made it
            info = real_lstat(path, *args, **kwargs)
            if os.fspath(path) == str(target):
                values = list(info)
                values[4] = 4242
                return os.stat_result(values)
            return info

        monkeypatch.setattr(cache_trust.os, "lstat", lstat)
    else:
        monkeypatch.setattr(cache_trust, "user_id", lambda: 4242)
    with pytest.raises(cache_trust.Refused, match="another user"):
        TrustedRoot.open(target)
    TrustedRoot.forget()


# --- temp files and concurrent writers -------------------------------------------------------
KILLED_WRITER = textwrap.dedent('''\
    import os, signal, sys
    from tracejit.runtime.cache_trust import TrustedRoot

    root = TrustedRoot.open(sys.argv[1], create=True)
    real_replace = os.replace

    def die(*args):  # killed after writing, before the rename
        os.kill(os.getpid(), signal.SIGKILL)

    os.replace = die
    root.write(root.path("v1", "ab", "abandoned.tjc"), b"x" * 100000)
''')

LIVE_WRITER = textwrap.dedent('''\
    import fcntl, os, sys, tempfile, time
    folder = sys.argv[1]
    handle, path = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    fcntl.flock(handle, fcntl.LOCK_EX)
    print(path, flush=True)
    time.sleep(60)
''')


def test_verify_and_prune_remove_temp_files_of_killed_writers_only(program):
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(program.cache_dir)],
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (orphan,) = program.cache_dir.glob("v1/ab/.tmp-*")
    stale = program.cache_dir / "v1" / "stats" / ".tmp-old"
    stale.parent.mkdir(exist_ok=True)
    stale.write_bytes(b"{")
    shard = program.entries()[0].parent
    writer = subprocess.Popen([sys.executable, "-c", LIVE_WRITER, str(shard)],
                              stdout=subprocess.PIPE, text=True)
    try:
        live = Path(writer.stdout.readline().strip())
        past = time.time() - 60
        for path in (orphan, stale, live):
            os.utime(path, (past, past))
        status, output = verify(program.cache_dir)
        assert status == 0, output
        assert "removed 2 temp file(s)" in output
        assert not orphan.exists() and not stale.exists()
        assert live.exists()  # its writer is alive: not an orphan
        out = io.StringIO()
        cli.main(["cache", "prune", "--max-size", "1G", "--cache-dir", str(program.cache_dir)],
                 out=out)
        assert live.exists() and "temp file" not in out.getvalue()
    finally:
        writer.kill()
        writer.wait()
    past = time.time() - 60
    os.utime(live, (past, past))
    out = io.StringIO()
    cli.main(["cache", "prune", "--max-size", "1G", "--cache-dir", str(program.cache_dir)],
             out=out)
    assert "removed 1 temp file(s)" in out.getvalue() and not live.exists()


def test_processes_writing_the_same_key_at_once_leave_one_valid_entry(tmp_path):
    program = Program(tmp_path / "racing")
    env = program.env(START_AT=str(time.time() + 2.0))
    processes = [subprocess.Popen(program.command(), cwd=program.folder, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
    for process in processes:
        TALLY["trials"] += 1
        stdout, stderr = process.communicate(timeout=120)
        if process.returncode != 0 or "Traceback" in stderr:
            TALLY["crashes"] += 1
        assert process.returncode == 0, stderr
        if json.loads(stdout)["results"] != [expected(values) for values in INPUTS]:
            TALLY["wrong results"] += 1
        assert json.loads(stdout)["results"] == [expected(values) for values in INPUTS]
    assert len(program.entries()) == 1
    assert verify(program.cache_dir)[0] == 0
    assert not list(program.cache_dir.rglob(".tmp-*"))
    assert program.run()["stats"]["disk_hits"] == 1


# --- counters stay consistent -----------------------------------------------------------------
def test_stats_forget_what_prune_and_clear_removed(program):
    program.run()  # a second process: counters for the entry
    (entry,) = program.entries()
    key = entry.stem

    def stats():
        out = io.StringIO()
        cli.main(["cache", "stats", "--json", "--cache-dir", str(program.cache_dir)], out=out)
        return json.loads(out.getvalue())

    (row,) = stats()
    assert key in row["entries"]
    out = io.StringIO()
    cli.main(["cache", "prune", "--max-size", "0", "--cache-dir", str(program.cache_dir)],
             out=out)
    assert not program.entries() and stats() == []
    program.run()
    program.run()
    assert [key in row["entries"] for row in stats()] == [True]
    cli.main(["cache", "clear", "model", "--cache-dir", str(program.cache_dir)],
             out=io.StringIO())
    assert not program.entries() and stats() == []


def verify(cache_dir):
    out = io.StringIO()
    TrustedRoot.forget()
    status = cli.main(["cache", "verify", "--cache-dir", str(cache_dir)], out=out)
    return status, out.getvalue()


def test_zz_tally(capsys):
    """Every trial above (this module runs in order): no wrong result, no crash, no
    payload ran. ``pytest -s`` prints the counts."""
    with capsys.disabled():
        print(f"\ncache attacks: {TALLY}")
    assert TALLY["trials"] > 0
    assert TALLY["wrong results"] == TALLY["crashes"] == TALLY["payloads run"] == 0
