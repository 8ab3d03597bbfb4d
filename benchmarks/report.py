"""Tables, JSON and a markdown summary from the rows ``run_workload`` returns.

Ratios: ``× NumPy`` is NumPy eager's time / the candidate's (above 1: faster than NumPy);
``tracejit vs`` is the candidate's time / tracejit's (above 1: tracejit is faster), where
tracejit is the workload's first tracejit row.

>>> format_value(4321.0, "ms"), format_value(12.345, "ms"), format_value(1.356, "µs")
('4.32 s', '12.3', '1.36')
"""

from __future__ import annotations

import json
import math

# Workloads whose rounds are fresh processes (first calls), not interleaved samples.
FRESH_PROCESSES = ("first_call", "first_call_large")
SUMMARY_PEERS = ("NumPy eager", "torch eager", "torch.compile", "jax.jit", "numba", "numexpr",
                 "tracejit")


def format_value(value, unit):
    """Three significant digits; first-call milliseconds of a second or more as seconds."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if unit == "ms" and value >= 1000:
        return f"{value / 1000:.3g} s"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}" if value >= 1 else f"{value:.3f}"


def _with_unit(milliseconds, signed=False):
    """'12.3 ms', '4.32 s'; with ``signed`` a difference: '+8.06 ms', '-12 ms'."""
    sign = ""
    if signed and milliseconds is not None:
        sign = "-" if milliseconds < 0 else "+"
        milliseconds = abs(milliseconds)
    text = format_value(milliseconds, "ms")
    return sign + (text if text.endswith(" s") or text == "—" else f"{text} ms")


def _ratio(value):
    return "—" if value is None else f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def _difference(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return "0" if value == 0 else f"{value:.1e}"


def _as_ms(value, unit):
    return value / 1000 if unit == "µs" else value


def _facts(row, unit):
    """Compiles, the first (compiling) call, disk hits and the like, in a few words."""
    info, parts = row.get("info") or {}, []
    if "compiles" in info:
        parts.append(f"{info['compiles']} compile{'s' * (info['compiles'] != 1)}")
    first_ms, median = row.get("first_call_ms"), row.get("median")
    compiled = not row.get("peer", "").startswith("NumPy")  # NumPy's first call only warms up
    if compiled and first_ms and median and first_ms > 50 and first_ms > 5 * _as_ms(median, unit):
        parts.append(f"first call {_with_unit(first_ms)}")
    if info.get("dtypes"):
        parts.append(info["dtypes"])
    if info.get("disk_hits"):
        parts.append(f"{info['disk_hits']} disk hit")
    if info.get("side_exits"):
        parts.append(f"side exits {info['side_exits']}")
    if row.get("cpu_ms_per_call") is not None and unit == "ms":
        parts.append(_usage(row))
    if "warm_call_ms" in info:
        extra = row["median"] - info["warm_call_ms"] if row["median"] else None
        parts.append(f"then {_with_unit(info['warm_call_ms'])}/call (the first call: "
                     f"{_with_unit(extra, signed=True)})")
    return ", ".join(parts)


def _usage(row):
    """A sample's resource use per call (``harness.measure_interleaved``), in a few words:
    CPU of all the process's threads, page faults, preemptions.

    >>> _usage(dict(cpu_ms_per_call=20.94, faults_per_call=0.0, preemptions_per_call=0.25))
    'per call: CPU 20.9 ms, 0 page faults, 0.25 preemptions'
    """
    return (f"per call: CPU {row['cpu_ms_per_call']:.3g} ms, "
            f"{row['faults_per_call']:.3g} page faults, "
            f"{row['preemptions_per_call']:.3g} preemptions")


def _first_calls(result):
    """Whether the result times first calls in fresh processes (compile times included)."""
    return result["key"] in FRESH_PROCESSES or result["key"].startswith("compile_")


def format_workload(number, result):
    """The text table of one workload, with its notes."""
    unit = result["unit"]
    if result.get("crash"):
        return f"{number}. {result['title']} — CRASHED: {result['crash']}"
    what = "fresh processes" if _first_calls(result) else "interleaved rounds"
    lines = [f"{number}. {result['title']} — median {unit} of {result['rounds']} {what}; "
             f"target for tracejit: {result['target']}"]
    if result.get("other_load") is not None:
        lines[0] += f"; other processes used {result['other_load']:.0%} of the CPUs meanwhile"
    header = (f"   {'candidate':<42}{unit:>9}{'× NumPy':>9}{'tracejit vs':>13}"
              f"{'max rel diff':>14}  status; notes")
    lines += [header, "   " + "-" * (len(header) + 20)]
    for row in result["rows"]:
        details = "; ".join(part for part in (row["status"], _facts(row, unit), row.get("note"))
                            if part)
        lines.append(f"   {row['candidate']:<42}{format_value(row['median'], unit):>9}"
                     f"{_ratio(row['x_numpy']):>9}{_ratio(row['tracejit_vs']):>13}"
                     f"{_difference(row['max_rel_diff']):>14}  {details}")
    for peer, reason in result.get("skipped", {}).items():
        lines.append(f"   not run: {peer}: {reason}")
    lines += [f"   note: {note}" for note in result.get("notes", [])]
    return "\n".join(lines)


# --- the summary (DESIGN.md §6's table) --------------------------------------------------------
def _cell(row, result):
    text = format_value(row["median"], result["unit"])
    if row["median"] is not None and (result["unit"] == "µs" or _first_calls(result)
                                      and not text.endswith(" s")):
        text += f" {result['unit']}"
    info = row.get("info") or {}
    if "warm_call_ms" in info and row["median"] is not None:
        extra = _with_unit(row["median"] - info["warm_call_ms"], signed=True)
        text += f" ({extra} over a warm call)"
    if info.get("summary"):  # a few words the workload wants in the table (memory, ...)
        text += f" ({info['summary']})"
    if result["key"] == "rnn" and "compiles" in info:
        text += f" ({info['compiles']} compile{'s' * (info['compiles'] != 1)}"
        text += f", 1st pass {_with_unit(row['first_call_ms'])})" if row.get(
            "first_call_ms") else ")"
    if row["status"] != "ok":
        text = f"{text} ({row['status']})" if row["median"] is not None else row["status"]
    return text


def _versus_fastest_peer(tracejit, rows):
    """'0.52× jax.jit': the fastest peer's time / tracejit's (above 1: tracejit is faster)."""
    peers = [row for row in rows if row["peer"] in SUMMARY_PEERS[1:-1] and row["median"]
             and row["status"] == "ok"]
    if tracejit is None or not tracejit["median"] or not peers:
        return "—"
    fastest = min(peers, key=lambda row: row["median"])
    return f"{_ratio(fastest['median'] / tracejit['median'])} {fastest['peer']}"


def summary_rows(results):
    """One line per workload (its first row per peer), plus one per extra tracejit row."""
    lines = []
    for result in results:
        if result.get("crash"):
            lines.append(dict(workload=result["title"], target=result["target"], x_numpy=None,
                              versus="—", cells={"tracejit": f"crash: {result['crash']}"}))
            continue
        first = {}
        for row in result["rows"]:
            first.setdefault(row["peer"], row)
        tracejit = first.get("tracejit")
        title = result["title"]
        if tracejit is not None and tracejit["candidate"] != "tracejit":
            title += f" — {tracejit['candidate']}"
        lines.append(dict(workload=title, target=result["target"], cells={
            peer: _cell(row, result) for peer, row in first.items() if peer in SUMMARY_PEERS},
            x_numpy=tracejit and tracejit["x_numpy"],
            versus=_versus_fastest_peer(tracejit, first.values())))
        for row in result["rows"]:
            if row["peer"] == "tracejit" and row is not tracejit:
                cells = {"tracejit": _cell(row, result)}
                if "NumPy eager" in first:
                    cells["NumPy eager"] = _cell(first["NumPy eager"], result)
                # A warm start has no counterpart among the peers' cold first calls.
                versus = ("—" if "warm start" in row["candidate"]
                          else _versus_fastest_peer(row, first.values()))
                lines.append(dict(workload=f"{result['title']} — {row['candidate']}",
                                  target="", cells=cells, x_numpy=row["x_numpy"],
                                  versus=versus))
    return lines


def markdown_table(results):
    header = ["workload", "NumPy", "torch eager", "torch.compile", "jax.jit", "numba", "numexpr",
              "tracejit", "tracejit × NumPy", "tracejit vs fastest peer", "target for tracejit"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for line in summary_rows(results):
        cells = [line["cells"].get(peer, "—") for peer in SUMMARY_PEERS]
        lines.append("| " + " | ".join([line["workload"], *cells, _ratio(line["x_numpy"]),
                                        line["versus"], line["target"] or "—"]) + " |")
    return "\n".join(lines)


def readme_markdown(results, machine_line, command, seconds, quick, facts):
    kind = "quick run (fewer rounds and processes; same sizes)" if quick else "full run"
    loads = facts.get("load_average"), facts.get("load_average_end")
    changes = facts.get("library_changes")
    measured = f"commit {facts.get('commit')}" + (
        f" plus uncommitted changes to {', '.join(changes)}" if changes else "")
    return "\n".join([
        "Median ms per call (µs for the call overhead; seconds where marked), NumPy eager = 1×;",
        "the candidates of a workload interleaved round-robin in one worker process, each sample",
        "after a 0.15 s pause and one untimed call, results checked against NumPy (first call:",
        "fresh processes).",
        "",
        markdown_table(results),
        "",
        f"Machine: {machine_line}; measured {measured}.",
        f"Command: `{command}` ({kind}, {seconds / 60:.1f} min). The machine is shared and "
        "noisy" + (f" (load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end)"
                   if None not in loads else "") + "; compare ratios within one run.",
        "",
        "CPU used by other processes during each workload: " + ", ".join(
            f"{result['title'].split(',')[0]} {result['other_load']:.0%}" for result in results
            if result.get("other_load") is not None) + ".",
        "",
        "`tracejit × NumPy` = NumPy eager's time / tracejit's; `tracejit vs fastest peer` = "
        "that peer's time / tracejit's (above 1: tracejit is faster). Notes:",
        "",
        *(f"* {result['title']}: {note}" for result in results for note in result["notes"]),
        "",
    ])


# --- files -------------------------------------------------------------------------------------
def write_json(path, report):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n")
