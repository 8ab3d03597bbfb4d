"""The ``tracejit`` command (also ``python -m tracejit``): inspect the on-disk compile cache.

    tracejit cache list [FUNC...] [--json]
    tracejit cache show FUNC [--ir] [--llvm] [--asm] [--guards] [--source] [--json]
    tracejit cache stats [--json]
    tracejit cache clear [FUNC]
    tracejit cache verify [--json]
    tracejit cache prune --max-size SIZE [--dry-run]   (SIZE like 500K, 200M, 1G)
    tracejit cache resign --yes
    tracejit cache prepare [--json]   (build the per-machine objects now: at install time)
    tracejit env [--json]       (also: tracejit --version --verbose)

Every verb takes ``--cache-dir DIR`` (default: ``TRACEJIT_CACHE_DIR``, else
``$XDG_CACHE_HOME/tracejit``, else ``~/.cache/tracejit``). Problems are one line on
stderr and exit status 1 (bad arguments: 2, as argparse does), never a traceback; output
cut short by a closed pipe (``| head``) is not an error.

The command reads the cache as a program does, through ``tracejit.runtime.cache_trust``: a cache
directory another user owns or can write to is refused, an entry that is not a regular
file or whose signature does not match is reported, never followed or trusted. ``verify``
and ``prune`` also remove temp files their writers left when killed. ``resign --yes``
signs every entry with this cache's key: for a cache the user copied here on purpose
(entries are code; only re-sign what you would run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

from .config import OptionError, configure_codegen, default_cache_dir, default_cache_max, parse_size
from .version import __version__


class CommandError(Exception):
    """A user-facing problem: printed as one line, exit status 1."""


def build_parser():
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a sub-command's --cache-dir must not reset one given before it.
    common.add_argument("--cache-dir", default=argparse.SUPPRESS,
                        help="the cache directory (default: TRACEJIT_CACHE_DIR or "
                             "~/.cache/tracejit)")
    parser = argparse.ArgumentParser(
        prog="tracejit",
        description="tracejit: a tracing JIT for NumPy-style model functions. "
        "This command inspects tracejit's on-disk compile cache.",
        parents=[common],
    )
    parser.add_argument("--version", action="store_true",
                        help="print the version (with --verbose: the whole environment)")
    parser.add_argument("--verbose", action="store_true", help="with --version: print what "
                        "`tracejit env` prints")
    topics = parser.add_subparsers(dest="topic", metavar="{cache,env}")
    cache = topics.add_parser("cache", help="inspect the compile cache", parents=[common])
    environment = topics.add_parser(
        "env", help="versions, CPU and its features, BLAS, threads, the cache directory",
        parents=[common])
    environment.add_argument("--json", action="store_true", help=JSON_HELP)
    verbs = cache.add_subparsers(dest="verb", metavar="VERB", required=True)
    listing = verbs.add_parser("list", help="one line per cached variant, by function name "
                               "then newest first", parents=[common])
    listing.add_argument("functions", metavar="FUNC", nargs="*",
                         help="only these functions (name, module.name, or a key prefix)")
    listing.add_argument("--json", action="store_true", help=JSON_HELP)
    show = verbs.add_parser("show", help="details of a function's entries", parents=[common])
    show.add_argument("function", metavar="FUNC", help="function name, module.name, or a key "
                      "prefix")
    for flag, what in (("--ir", "the IR of each path"), ("--llvm", "optimized LLVM IR"),
                       ("--asm", "assembly"), ("--guards", "entry and value guards"),
                       ("--source", "the rewritten model source and the generated wrapper")):
        show.add_argument(flag, action="store_true", help=f"print {what}")
    show.add_argument("--json", action="store_true", help=JSON_HELP)
    stats = verbs.add_parser("stats", help="counters persisted across processes",
                             parents=[common])
    stats.add_argument("--json", action="store_true", help=JSON_HELP)
    clear = verbs.add_parser("clear", help="delete entries (all, or one function's)",
                             parents=[common])
    clear.add_argument("function", metavar="FUNC", nargs="?",
                       help="only this function's entries (name, module.name, or a key "
                            "prefix); without it, every entry and counter")
    verify = verbs.add_parser("verify", help="check every entry's signature and contents",
                              parents=[common])
    verify.add_argument("--json", action="store_true", help=JSON_HELP)
    prune = verbs.add_parser("prune", help="delete least recently used entries",
                             parents=[common])
    prune.add_argument("--max-size", required=True, metavar="SIZE",
                       help="keep at most this many bytes of entries (500K, 200M, 1G)")
    prune.add_argument("--dry-run", action="store_true",
                       help="list what would be removed; remove nothing")
    resign = verbs.add_parser("resign", help="sign every entry with this cache's key (for a "
                              "cache you copied here yourself)", parents=[common])
    resign.add_argument("--yes", action="store_true",
                        help="confirm: trust every entry in the directory as your own code")
    prepare = verbs.add_parser("prepare", help="build tracejit's per-machine objects (the "
                               "thread pool, the entry guards' array check, the own GEMM) "
                               "into the cache now, so that no first call builds them",
                               parents=[common])
    prepare.add_argument("--json", action="store_true", help=JSON_HELP)
    return parser


JSON_HELP = "print JSON instead of text"


def _cache(args):
    """The cache named on the command line, refused (one line, exit 1) when it cannot be
    trusted; a missing directory is an empty cache and is not created."""
    from .cache import DiskCache
    from .cache_trust import Refused

    cache = DiskCache(getattr(args, "cache_dir", None) or default_cache_dir())
    try:
        cache.check()
    except Refused as error:
        raise CommandError(str(error)) from None
    return cache


def _headers(cache):
    """One row per entry file; ``corrupt`` rows carry the ``problem``."""
    rows = cache.listing()
    for row in rows:
        if "problem" in row:
            row["corrupt"] = True
    return rows


def _matches(header, name):
    qualified = f"{header.get('module')}.{header.get('function')}"
    return name in (header.get("function"), qualified) or header.get("key", "").startswith(
        name) or (header.get("function") or "").split(".")[-1] == name


def _empty_message(cache):
    return f"the cache at {os.path.dirname(cache.root)} is empty"


def _signature_text(signature):
    parts = []
    for leaf in signature or []:
        if len(leaf) in (3, 4):  # (type, dtype, shape[, "grad"]): an array leaf
            type_name, dtype, shape = leaf[:3]
            dims = ",".join(f"{d[0]}..{d[1]}" if isinstance(d, list) else str(d)
                            for d in shape)
            parts.append(f"{np.dtype(dtype).name}[{dims}]" + (
                " Tensor" if type_name == "Tensor" else "") + (
                " requires_grad" if leaf[3:] == ["grad"] else ""))
        elif leaf[0] == "any":  # a number taken at run time (cache_key's open key)
            parts.append(f"any {leaf[1]}")
        else:
            parts.append(repr(leaf[1]))
    return "(" + ", ".join(parts) + ")"


def command_list(args, out):
    cache = _cache(args)
    rows = _headers(cache)
    if args.functions:
        rows = [row for row in rows if not row.get("corrupt") and any(
            _matches(row, name) for name in args.functions)]
    if args.json:
        json.dump([{k: v for k, v in row.items() if k != "entry_guards"} for row in rows], out,
                  indent=2, default=str)
        out.write("\n")
        return 0
    if not rows and args.functions and cache.entries():
        raise CommandError(f"no cache entry for {' or '.join(map(repr, args.functions))} "
                           "(see `tracejit cache list`)")
    if not rows:
        print(_empty_message(cache), file=out)
        return 0
    # By function name, then newest first; corrupt entries last.
    rows.sort(key=lambda row: (bool(row.get("corrupt")), str(row.get("function")),
                               -row.get("created", 0)))
    now = time.time()
    print(f"{'function':28} {'file':20} {'age':>5} {'signature':40} {'paths':>5} "
          f"{'kernels':>7} {'size':>7} {'key':12}", file=out)
    for row in rows:
        if row.get("corrupt"):
            print(f"{'<corrupt entry>':28} {'':20} {'':>5} {'':40} {'':>5} {'':>7} "
                  f"{_size_text(row['bytes']):>7} {row['key'][:12]}", file=out)
            continue
        file = os.path.basename(row.get("file") or "?")
        print(f"{_clip(row['function'], 28):28} {_clip(file, 20):20} "
              f"{_age_text(now - row.get('created', now)):>5} "
              f"{_clip(_signature_text(row.get('signature')), 40, ', '):40} "
              f"{row['paths']:>5} {row['kernels']:>7} {_size_text(row['bytes']):>7} "
              f"{row['key'][:12]}", file=out)
    total = sum(row["bytes"] for row in rows)
    print(f"{len(rows)} entries, {_size_text(total)} in {cache.root}", file=out)
    return 0


def _entries_for(cache, name):
    from .cache import CorruptEntry, read_entry

    selected = [row for row in _headers(cache) if not row.get("corrupt") and
                _matches(row, name)]
    if not selected:
        if not cache.entries():
            raise CommandError(_empty_message(cache))
        raise CommandError(f"no cache entry for {name!r} (see `tracejit cache list`)")
    for row in selected:
        try:
            header, body = read_entry(row["path"], root=cache.trusted(), key=row["key"])
        except (CorruptEntry, FileNotFoundError) as error:
            raise CommandError(f"entry {row['key'][:12]} is corrupt: {error}") from None
        yield header, body


def _compiled_pieces(program):
    """The programs holding object code in a stored program: itself, or for a program with
    captured loops (``"kind": "loops"``: its IR plus its segments' and loop bodies'
    programs, ``serialize._loop_program_to_json``) each of its pieces, depth first."""
    if isinstance(program, dict) and program.get("kind") == "loops":
        for piece in program.get("pieces") or ():
            yield from _compiled_pieces(piece)
    else:
        yield program


def command_show(args, out):
    cache = _cache(args)
    shown = []
    for header, body in _entries_for(cache, args.function):
        variant = body["variant"]
        if args.json:
            shown.append({"header": header, "dependencies": body["dependencies"],
                          "paths": [{"via": path["via"], "graph": path["program"]["graph"],
                                     "kernels": [kernel for piece in _compiled_pieces(
                                         path["program"]) for kernel in piece["kernels"]]}
                                    for path in variant["paths"]]})
            continue
        print(f"{header['function']}  ({header.get('module')}, {header.get('file')})",
              file=out)
        print(f"  key {header['key']}", file=out)
        print(f"  signature {_signature_text(header.get('signature'))}", file=out)
        print(f"  created {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(header['created']))}"
              f", tracejit {header.get('tracejit')}", file=out)
        for dependency in body["dependencies"]:
            print(f"  depends on {dependency['module']}.{dependency['qualname']} "
                  f"({dependency['file']})", file=out)
        if args.guards:
            print("  entry guards:", file=out)
            for line in header.get("entry_guards", []):
                print(f"    {line}", file=out)
        if args.source and body.get("model_source"):
            print("  rewritten model source:", file=out)
            print(_indent(body["model_source"], 4), file=out)
        for path in variant["paths"]:
            program = path["program"]
            pieces = list(_compiled_pieces(program))
            via = " <- ".join(f"exit at guard {g}" for g in path["via"]) or "root"
            names = [kernel["name"] for piece in pieces for kernel in piece["kernels"]]
            print(f"  path [{via}]: {len(names)} kernel(s): {', '.join(names)}", file=out)
            if args.guards:
                for line in program["graph"].splitlines():
                    if line.strip().startswith(("guard ", "shape_guard ")):
                        print(f"    {line.strip()}", file=out)
            if args.ir:
                print(_indent(program["graph"], 4), file=out)
            if args.source:
                for piece in pieces:
                    print(_indent(piece["wrapper"], 4), file=out)
            for piece in pieces if args.llvm or args.asm else ():  # a module each
                from .serialize import stored_text

                optimized_ir = stored_text(piece["optimized_ir"], body["blobs"])
                if args.llvm:
                    print(_indent(optimized_ir, 4), file=out)
                if args.asm:
                    from tracejit.codegen.llvm import assembly_of  # LLVM loads only when asked

                    print(_indent(assembly_of(optimized_ir), 4), file=out)
    if args.json:
        json.dump(shown, out, indent=2, default=str)
        out.write("\n")
    return 0


def command_stats(args, out):
    cache = _cache(args)
    rows = cache.persisted_stats()
    if args.json:
        json.dump(rows, out, indent=2, default=str)
        out.write("\n")
        return 0
    if not rows:
        if not cache.entries():
            print(_empty_message(cache), file=out)
        else:
            print("no counters recorded yet (they are written when a process using "
                  "tracejit exits)", file=out)
        return 0
    for row in rows:
        eager = row.get("eager_calls", {})
        print(f"{row.get('function')}  ({row.get('module')}, {row.get('file')})", file=out)
        print(f"  calls {row.get('calls', 0)}: compiled {row.get('compiled_calls', 0)}, traced "
              f"{row.get('traced_calls', 0)}, eager {sum(eager.values())}, raised "
              f"{row.get('raised_calls', 0)}; compiles "
              f"{row.get('compiles', 0)}, loaded from disk {row.get('disk_hits', 0)}",
              file=out)
        policy = [f"{row[key]} {what}" for key, what in (
            ("background_compiles", "compiled in the background (long)"),
            ("refused_compiles", "not compiled (too costly)"),
            ("storm_calls", "eager in a recompile storm")) if row.get(key)]
        if policy:
            print(f"  compile cost: {', '.join(policy)}", file=out)
        for reason, count in sorted(eager.items()):
            print(f"  eager: {count} x {reason}", file=out)
        for guard, count in sorted(row.get("side_exits", {}).items()):
            print(f"  side exits: {count} x {guard}", file=out)
        for key, entry in sorted(row.get("entries", {}).items()):
            print(f"  entry {key[:12]}: {entry.get('calls', 0)} compiled calls", file=out)
    return 0


def command_clear(args, out):
    cache = _cache(args)
    rows = _headers(cache)
    selected = [row for row in rows if args.function is None or (
        not row.get("corrupt") and _matches(row, args.function))]
    if args.function is not None and not selected:
        if not rows:
            raise CommandError(_empty_message(cache))
        raise CommandError(f"no cache entry for {args.function!r} (see `tracejit cache list`)")
    cache.remove_entries(selected)
    if args.function is None:
        import shutil

        shutil.rmtree(os.path.join(cache.root, "stats"), ignore_errors=True)  # never follows links
    else:
        _forget_emptied_functions(cache, selected)
    print(f"removed {len(selected)} entr{'y' if len(selected) == 1 else 'ies'}", file=out)
    return 0


def _forget_emptied_functions(cache, removed):
    """Counters of functions that no longer have an entry go with their last one, so
    ``stats`` never reports entries that ``list`` does not show."""
    left = {(row.get("function"), row.get("module")) for row in _headers(cache)}
    for function in {(row.get("function"), row.get("module")) for row in removed
                     if not row.get("corrupt")} - left:
        cache.forget_counters(function=function)


def command_verify(args, out):
    from .cache import CorruptEntry, read_entry

    cache = _cache(args)
    orphans = cache.remove_orphans()
    results = []
    for path in cache.entries():
        try:
            _, body = read_entry(path, root=cache.trusted())
            for entry in body["variant"]["paths"]:
                for piece in _compiled_pieces(entry["program"]):
                    if piece["object"] >= len(body["blobs"]):
                        raise CorruptEntry("object code is missing")
            results.append({"path": path, "ok": True})
        except (CorruptEntry, KeyError, TypeError) as error:
            results.append({"path": path, "ok": False, "problem": str(error)})
        except FileNotFoundError:
            continue  # removed while we looked
    if orphans and not args.json:
        print(f"removed {len(orphans)} temp file(s) left by killed writers", file=out)
    if args.json:
        json.dump(results, out, indent=2)
        out.write("\n")
    else:
        if not results:
            print(_empty_message(cache), file=out)
        for result in results:
            if not result["ok"]:
                print(f"corrupt: {result['path']}: {result['problem']}", file=out)
        bad = sum(not result["ok"] for result in results)
        if results:
            print(f"{len(results) - bad} of {len(results)} entries ok", file=out)
    return 1 if any(not result["ok"] for result in results) else 0


def command_prune(args, out):
    try:
        limit = parse_size(args.max_size)
    except ValueError as error:
        raise CommandError(f"--max-size: {error}") from None
    cache = _cache(args)
    doomed_files, total = cache.least_recently_used(limit)
    doomed_paths = {path for path, _ in doomed_files}
    doomed = [row for row in _headers(cache) if row["path"] in doomed_paths]
    if args.dry_run:
        for row in doomed:
            print(f"would remove {row['key'][:12]} {row.get('function', '<corrupt entry>')} "
                  f"({_size_text(row['bytes'])})", file=out)
        print(f"would remove {len(doomed)} entries; {_size_text(total)} would be left "
              f"(limit {_size_text(limit)})", file=out)
        return 0
    orphans = cache.remove_orphans()
    cache.remove_entries(doomed)
    _forget_emptied_functions(cache, doomed)
    if orphans:
        print(f"removed {len(orphans)} temp file(s) left by killed writers", file=out)
    print(f"removed {len(doomed)} entries; {_size_text(total)} left (limit "
          f"{_size_text(limit)})", file=out)
    return 0


def command_resign(args, out):
    cache = _cache(args)
    if not cache.entries() and not cache.runtime_objects():
        print(_empty_message(cache), file=out)
        return 0
    if not args.yes:
        raise CommandError(
            f"re-signing makes every entry in {cache.directory} trusted code that tracejit "
            "links into your programs; if you copied this cache here yourself, run "
            "`tracejit cache resign --yes`")
    signed, skipped = cache.resign()
    for path, problem in skipped:
        print(f"skipped: {path}: {problem}", file=out)
    print(f"signed {signed} file(s) with the key of {cache.directory}", file=out)
    return 1 if skipped else 0


def _size_text(size):
    for unit in ("B", "K", "M", "G"):
        if size < 1024 or unit == "G":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size}G"


def _clip(text, width, separator=None):
    """``text`` cut to ``width`` columns with an ellipsis; with ``separator``, cut only where
    it occurs (a signature is never cut mid-dtype)."""
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    if separator and separator in cut:
        cut = cut[: cut.rindex(separator) + len(separator)]
    return cut + "\u2026"


def _age_text(seconds):
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"


def environment(cache_dir=None):
    """What tracejit runs on: versions, the CPU and its features, the BLAS, threads and the
    cache (directory, size, cap, trusted or why not), as a dict."""
    from tracejit.codegen import llvm, parallel

    from .cache import DiskCache
    from .cache_trust import Refused

    configure_codegen()  # the threads and GEMM a jit function here would get
    host = llvm.host_description()
    wanted = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "neon", "sve")
    features = [name for name in (f[1:] for f in host["features"].split(",") if f[0] == "+")
                if name in wanted]
    import llvmlite

    directory = cache_dir or default_cache_dir()
    cache = DiskCache(directory)
    try:
        cache.check()
        trusted = "yes"
    except Refused as error:
        trusted = f"no: {error}"
    try:
        cap = default_cache_max()
    except OptionError as error:
        cap = str(error)
    size = 0
    if trusted == "yes":
        root = cache.trusted()
        for path in cache.entries():
            try:
                size += root.describe(path)[0]
            except OSError:
                pass
    return {
        "tracejit": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "llvmlite": llvmlite.__version__,
        "llvm": host["llvm"],
        "cpu": host["cpu"],
        "cpu_features": features,
        "blas": host["blas"] or "none found: matmul runs on tracejit's own loops",
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
        "threads": parallel.thread_count(),
        "cache_dir": directory,
        "cache_bytes": size,
        "cache_max_bytes": cap,
        "cache_trusted": trusted,
    }


def command_env(args, out):
    info = environment(getattr(args, "cache_dir", None))
    if getattr(args, "json", False):
        json.dump(info, out, indent=2)
        out.write("\n")
        return 0
    for key, value in info.items():
        if isinstance(value, list):
            value = " ".join(value) or "-"
        elif key in ("cache_bytes", "cache_max_bytes") and isinstance(value, int):
            value = _size_text(value) if value else "no cap"
        print(f"{key:18} {value}", file=out)
    return 0


def command_prepare(args, out):
    """Build what every process on this machine shares (``codegen/machine_objects.py``:
    the thread pool's runtime, the entry guards' array check, the own GEMM in float32 and
    float64; about 1.5 s of CPU), and tracejit's own-code digest, into the cache, where a
    first call with an empty cache would build them on its critical path (and hash
    tracejit's files, ~5 ms). Run it at install time, or in a container
    image's build, with the environment the programs will run with (the GEMM setting is
    part of the keys). Objects already there are kept."""
    from tracejit.codegen import machine_objects, parallel

    from .cache_key import tracejit_code_digest

    cache = _cache(args)
    configure_codegen()
    parallel.set_object_store(cache.load_object, cache.save_object,
                              lambda: tracejit_code_digest(cache))  # as jit functions do
    rows = []
    for label, build in machine_objects.builders():
        start = time.process_time()
        object_code = build()
        rows.append({"object": label, "bytes": len(object_code),
                     "cpu_seconds": round(time.process_time() - start, 3)})
    tracejit_code_digest(cache)  # stored with a stamp of the files (cache_key)
    if getattr(args, "json", False):
        json.dump({"cache_dir": os.path.dirname(cache.root), "objects": rows}, out, indent=2)
        out.write("\n")
        return 0
    for row in rows:
        print(f"{row['object']:32} {_size_text(row['bytes']):>8}  "
              f"{row['cpu_seconds'] * 1e3:7.0f} ms", file=out)
    return 0


def _indent(text, spaces):
    return "\n".join(" " * spaces + line for line in text.splitlines())


COMMANDS = {"list": command_list, "show": command_show, "stats": command_stats,
            "clear": command_clear, "verify": command_verify, "prune": command_prune,
            "resign": command_resign, "prepare": command_prepare}


def main(argv=None, out=None):
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(parser, args, out)
    except BrokenPipeError:
        # `tracejit cache show f --asm | head`: the reader has what it wanted. Point stdout
        # at devnull so the interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0


def _dispatch(parser, args, out):
    if args.version:
        if args.verbose:
            return command_env(args, out)
        print(f"tracejit {__version__}", file=out)
        return 0
    if args.topic is None:
        parser.print_help(out)
        return 0
    if args.topic == "env":
        return command_env(args, out)
    from .cache_trust import Refused, Rejected

    try:
        return COMMANDS[args.verb](args, out)
    except (CommandError, Refused, Rejected) as error:
        print(f"tracejit: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # main() handles it: not an error
    except OSError as error:
        print(f"tracejit: {error.strerror or error}: {error.filename or ''}".rstrip(": "),
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
