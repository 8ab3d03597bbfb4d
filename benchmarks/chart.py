"""The benchmark chart as SVG: one panel per workload, a horizontal bar per candidate (log
scale, lower is better), tracejit's bars orange, NumPy's grey, the peers' blue.

SVG is text, so it needs no plotting library, diffs in review and renders on GitHub and in
any browser. ``python -m benchmarks`` writes ``benchmarks/results/benchmarks.svg``; redraw
it from a saved run with ``python -m benchmarks.chart benchmarks/results/benchmarks.json``.

>>> svg = render([dict(title="x", unit="ms", rows=[
...     dict(candidate="NumPy eager", peer="NumPy eager", median=2.0, x_numpy=1.0),
...     dict(candidate="tracejit", peer="tracejit", median=0.5, x_numpy=4.0)])], "a machine")
>>> svg.startswith("<svg") and svg.count("<rect") >= 2 and "4× NumPy" in svg
True
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from xml.sax.saxutils import escape

COLUMNS = 2
PANEL_WIDTH, LABEL_WIDTH, BAR_WIDTH = 630, 250, 220
TITLE_HEIGHT, BAR_HEIGHT, BAR_GAP, PANEL_GAP = 22, 14, 4, 18
COLORS = {"tracejit": "#e8710a", "NumPy": "#9e9e9e", "peer": "#4a7ebb"}


def _color(row):
    if row["peer"] == "tracejit":
        return COLORS["tracejit"]
    return COLORS["NumPy"] if row["peer"].startswith("NumPy") else COLORS["peer"]


def _value_text(row, unit):
    from .report import format_value

    text = format_value(row["median"], unit)
    if not text.endswith(" s"):
        text += f" {unit}"
    if row.get("x_numpy"):
        ratio = row["x_numpy"]
        text += f" ({ratio:.2g}× NumPy)" if ratio < 10 else f" ({ratio:.0f}× NumPy)"
    return text


def _panel(result, left, top):
    """The SVG elements of one workload's panel, and its height."""
    title = escape(result["title"])
    parts = [f'<text x="{left}" y="{top + 14}" class="title">{title}</text>']
    timed = [row for row in result.get("rows", []) if row.get("median")]
    if result.get("crash") or not timed:
        why = escape(f"crashed: {result.get('crash', 'no timed row')}"[:90])
        parts.append(f'<text x="{left}" y="{top + TITLE_HEIGHT + 12}">{why}</text>')
        return parts, TITLE_HEIGHT + BAR_HEIGHT + BAR_GAP
    low = min(row["median"] for row in timed) / 2
    high = max(row["median"] for row in timed) * 1.2
    span = math.log(high / low)
    for index, row in enumerate(timed):
        y = top + TITLE_HEIGHT + index * (BAR_HEIGHT + BAR_GAP)
        width = max(1.0, BAR_WIDTH * math.log(row["median"] / low) / span)
        bar_left = left + LABEL_WIDTH
        parts += [
            f'<text x="{bar_left - 6}" y="{y + 11}" text-anchor="end">'
            f'{escape(row["candidate"][:42])}</text>',
            f'<rect x="{bar_left}" y="{y}" width="{width:.1f}" height="{BAR_HEIGHT}" '
            f'fill="{_color(row)}"/>',
            f'<text x="{bar_left + width + 4:.1f}" y="{y + 11}">'
            f'{escape(_value_text(row, result["unit"]))}</text>',
        ]
    return parts, TITLE_HEIGHT + len(timed) * (BAR_HEIGHT + BAR_GAP)


def _wrapped(text, width=170, lines=2):
    """``text`` in at most ``lines`` lines of about ``width`` characters, cut at '; '."""
    rows = [""]
    for part in text.split("; "):
        candidate = f"{rows[-1]}; {part}" if rows[-1] else part
        if len(candidate) > width and rows[-1] and len(rows) < lines:
            rows.append(part)
        else:
            rows[-1] = candidate
    return rows


def render(results, machine_line):
    """The whole chart as SVG text: panels in ``COLUMNS`` columns, row by row."""
    body, heights, top = [], [], 53
    for start in range(0, len(results), COLUMNS):
        tallest = 0
        for column, result in enumerate(results[start:start + COLUMNS]):
            parts, height = _panel(result, 10 + column * PANEL_WIDTH, top)
            body += parts
            tallest = max(tallest, height)
        top += tallest + PANEL_GAP
        heights.append(tallest)
    width = 20 + COLUMNS * PANEL_WIDTH
    header = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top}" '
        f'viewBox="0 0 {width} {top}" font-family="sans-serif" font-size="11">',
        "<style>.title { font-weight: bold; font-size: 12px; }</style>",
        f'<rect width="{width}" height="{top}" fill="white"/>',
        '<text x="10" y="16" class="title">tracejit benchmarks: median time per call, '
        'log scale, lower is better (orange: tracejit; grey: NumPy eager; blue: peers)</text>',
        *(f'<text x="10" y="{31 + 13 * row}">{escape(line)}</text>'
          for row, line in enumerate(_wrapped(machine_line))),
    ]
    return "\n".join([*header, *body, "</svg>"]) + "\n"


def write(path, results, machine_line):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, machine_line))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="a benchmarks.json that python -m benchmarks wrote")
    parser.add_argument("--output", type=Path, help="default: benchmarks.svg beside the JSON")
    args = parser.parse_args(argv)
    saved = json.loads(args.json.read_text())
    output = args.output or args.json.with_name("benchmarks.svg")
    write(output, saved["workloads"], saved.get("machine_line", ""))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
