"""HTML reports of model runs on the RTL (``npu run --on rtl|all --report DIR``, ``npu sim
--report DIR``): one self-contained file, inline SVG, no dependency beyond the standard
library.

Per model: the RTL's cycles against the executor's cycle model (whole run and per layer),
the per-layer spans and compute cycles, the task timeline of both (a row per unit, a
colour per layer), and the units' utilisation from the engine's hardware counters
(``BUSY_<unit>`` over ``CYCLES``; the NMU's array utilisation from ``NMU_MACS``).
"""

from __future__ import annotations

import html
from pathlib import Path

from sim.model_run import compare_outputs

__all__ = ["layer_rows", "model_section", "write_model_report", "write_sim_report"]

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}th{background:#f3f3f3}td.l,th.l{text-align:left}.ok{color:#2a7d2a}
.bad{color:#b00020;font-weight:bold}svg{background:#fafafa;border:1px solid #ddd}
h2{margin-top:2em;border-bottom:1px solid #ccc}"""


def _e(text) -> str:
    return html.escape(str(text))


def layer_rows(run):
    """Per layer of the build: RTL and executor span (first start to last end of its tile
    tasks; weight prefetches only count as tasks) and compute cycles.

    Parameters
    ----------
    run : sim.model_run.ModelRun

    Returns
    -------
    list of dict
        ``instruction``, ``op``, ``unit``, ``tasks``, ``rtl_first``, ``rtl_last``,
        ``rtl_compute``, ``exe_first``, ``exe_last``, ``exe_compute``, ``macs``.
    """
    owners = run.manifest.get("task_layers") or []
    rows = [dict(instruction=layer["instruction"], op=layer["op"], unit=layer["unit"],
                 macs=layer["macs"], tasks=0, rtl_first=None, rtl_last=0, rtl_compute=0,
                 exe_first=None, exe_last=0, exe_compute=0) for layer in run.manifest["layers"]]
    units = run.rtl.units
    compute = {k for k, u in enumerate(units) if u.startswith(("NMU", "CSTL"))}

    def add(row, side, start, end, is_compute, weights):
        if not weights:
            first = row[f"{side}_first"]
            row[f"{side}_first"] = start if first is None else min(first, start)
            row[f"{side}_last"] = max(row[f"{side}_last"], end)
        if is_compute:
            row[f"{side}_compute"] += end - start

    for task, unit, start, end in run.rtl.spans:
        if task < len(owners) and end is not None:
            number, weights = owners[task]
            rows[number]["tasks"] += 1
            add(rows[number], "rtl", start, end, unit in compute, weights)
    for r in run.executor.records:
        if r.index < len(owners):
            number, weights = owners[r.index]
            add(rows[number], "exe", r.start, r.end, not r.path, weights)
    return rows


def _bars(rows, width=720):
    """Horizontal bars: per layer the RTL span above the executor's, to one scale."""
    spans = [(r, (r["rtl_last"] - (r["rtl_first"] or 0)), (r["exe_last"] - (r["exe_first"] or 0)))
             for r in rows]
    top = max([max(a, b) for _, a, b in spans] + [1])
    left, bar, gap = 170, 11, 8
    height = len(spans) * (2 * bar + gap) + 30
    out = [f'<svg width="{left + width + 80}" height="{height}" '
           f'xmlns="http://www.w3.org/2000/svg" font-size="11">']
    y = 10
    for r, a, b in spans:
        out.append(f'<text x="4" y="{y + bar + 4}">{_e(r["instruction"])} {_e(r["op"])} '
                   f'({_e(r["unit"])})</text>')
        for value, colour, tag in ((a, PALETTE[0], "RTL"), (b, PALETTE[1], "model")):
            w = max(1, int(width * value / top))
            out.append(f'<rect x="{left}" y="{y}" width="{w}" height="{bar - 1}" '
                       f'fill="{colour}"><title>{tag}: {value} cycles</title></rect>')
            out.append(f'<text x="{left + w + 4}" y="{y + bar - 2}">{value}</text>')
            y += bar
        y += gap
    out.append(f'<rect x="{left}" y="{y}" width="10" height="10" fill="{PALETTE[0]}"/>'
               f'<text x="{left + 14}" y="{y + 9}">RTL (cycles from the engine)</text>'
               f'<rect x="{left + 220}" y="{y}" width="10" height="10" fill="{PALETTE[1]}"/>'
               f'<text x="{left + 234}" y="{y + 9}">executor cycle model</text></svg>')
    return "\n".join(out)


def _timeline(run, width=900):
    """Task timelines: a row per RTL unit, then a row per executor unit; colour = layer."""
    owners = run.manifest.get("task_layers") or []
    end = max(run.rtl.counters.get("CYCLES", 0), run.executor.total_cycles, 1)
    rtl_units = list(run.rtl.units)
    exe_units = list(run.executor.units)
    row, left = 14, 120
    height = (len(rtl_units) + len(exe_units)) * row + 50
    out = [f'<svg width="{left + width + 20}" height="{height}" '
           f'xmlns="http://www.w3.org/2000/svg" font-size="10">']

    def rect(y, start, stop, task, label):
        x = left + width * start / end
        w = max(0.5, width * (stop - start) / end)
        colour = PALETTE[owners[task][0] % len(PALETTE)] if task < len(owners) else "#888"
        return (f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 3}" '
                f'fill="{colour}"><title>task {task} {_e(label)}: {start}-{stop}</title>'
                f'</rect>')

    y = 14
    out.append(f'<text x="4" y="{y - 3}" font-weight="bold">RTL</text>')
    for k, unit in enumerate(rtl_units):
        out.append(f'<text x="4" y="{y + row - 4}">{_e(unit)}</text>')
        for task, u, start, stop in run.rtl.spans:
            if u == k:
                label = run.prep.labels[task] if task < len(run.prep.labels) else ""
                out.append(rect(y, start, stop if stop is not None else end, task, label))
        y += row
    y += 16
    out.append(f'<text x="4" y="{y - 3}" font-weight="bold">executor</text>')
    rows = {u: y + k * row for k, u in enumerate(exe_units)}
    for k, unit in enumerate(exe_units):
        out.append(f'<text x="4" y="{y + k * row + row - 4}">{_e(unit[-12:])}</text>')
    for r in run.executor.records:
        out.append(rect(rows[r.unit], r.start, r.end, r.index, r.label))
    out.append(f'<text x="{left}" y="{height - 4}">0</text><text x="{left + width - 60}" '
               f'y="{height - 4}">{end} cycles</text></svg>')
    return "\n".join(out)


def _utilisation(run, width=400):
    c = run.rtl.counters
    cycles = c.get("CYCLES", 0) or 1
    items = [(u, c.get(f"BUSY_{u}", 0) / cycles) for u in run.rtl.units]
    from npu.engine.config import EngineConfig

    cfg = EngineConfig.shipped(run.prep.device)
    if cfg.nmu is not None and c.get("NMU_MACS"):
        items.append(("NMU array", c["NMU_MACS"] / (cycles * cfg.nmu.lanes * cfg.nmu.cols)))
    left, row = 90, 16
    out = [f'<svg width="{left + width + 70}" height="{len(items) * row + 8}" '
           f'xmlns="http://www.w3.org/2000/svg" font-size="11">']
    for k, (name, value) in enumerate(items):
        y = 4 + k * row
        out.append(f'<text x="4" y="{y + 11}">{_e(name)}</text><rect x="{left}" y="{y}" '
                   f'width="{width}" height="{row - 4}" fill="#eee"/><rect x="{left}" '
                   f'y="{y}" width="{width * min(value, 1.0):.1f}" height="{row - 4}" '
                   f'fill="{PALETTE[4]}"/><text x="{left + width + 4}" y="{y + 11}">'
                   f'{100 * value:.1f} %</text>')
    out.append("</svg>")
    return "\n".join(out)


def model_section(run, title, floats=None):
    """The HTML of one model run (a ``<section>``)."""
    c = run.rtl.counters
    if run.error:
        verdict = f'<p class="bad">RTL: {_e(run.error)}</p>'
    elif run.mismatch is not None:
        verdict = f'<p class="bad">MISMATCH: {_e(run.mismatch)}</p>'
    else:
        total = sum(b.size for b in run.prep.program.buffers)
        count = len(run.prep.program.buffers)
        verdict = (f'<p class="ok">RTL == executor byte for byte ({count} buffers, '
                   f'{total} bytes)</p>')
    parts = [f"<section><h2>{_e(title)}</h2>", verdict,
             f"<p>{len(run.prep.program.tasks)} tasks on the {_e(run.prep.device)} engine; "
             f"RTL {c.get('CYCLES', 0)} cycles, executor cycle model "
             f"{run.executor.total_cycles} cycles, RTL / model {run.ratio:.2f}; wall time "
             f"{run.seconds:.1f} s</p>"]
    if floats is not None:
        for k, row in enumerate(compare_outputs(floats, run.executor_outputs)):
            err = "" if row["max_error"] is None else \
                f"max |float - int8| {row['max_error']:.4g} of {row['scale']:.4g}; "
            parts.append(f"<p>output {k}: {err}top-1 agreement {row['agree']} / "
                         f"{row['rows']}</p>")
    rows = layer_rows(run)
    parts.append("<h3>Cycles per layer (span from its first tile task to its last)</h3>")
    parts.append(_bars(rows))
    parts.append('<table><tr><th class="l">layer</th><th class="l">unit</th><th>tasks</th>'
                 "<th>RTL span</th><th>model span</th><th>RTL / model</th>"
                 "<th>RTL compute</th><th>model compute</th><th>MACs</th></tr>")
    for r in rows:
        a = r["rtl_last"] - (r["rtl_first"] or 0)
        b = r["exe_last"] - (r["exe_first"] or 0)
        ratio = f"{a / b:.2f}" if b else "-"
        parts.append(f'<tr><td class="l">{_e(r["instruction"])} {_e(r["op"])}</td>'
                     f'<td class="l">{_e(r["unit"])}</td><td>{r["tasks"]}</td><td>{a}</td>'
                     f"<td>{b}</td><td>{ratio}</td><td>{r['rtl_compute']}</td>"
                     f"<td>{r['exe_compute']}</td><td>{r['macs']}</td></tr>")
    parts.append("</table><h3>Unit utilisation (hardware counters: busy / cycles)</h3>")
    parts.append(_utilisation(run))
    parts.append("<h3>Task timeline (colour: layer)</h3>")
    parts.append(_timeline(run))
    parts.append("</section>")
    return "\n".join(parts)


def _page(title, body):
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>\n{body}\n</body></html>\n")


def write_model_report(directory, run, floats=None):
    """Write ``DIR/report.html`` for one model run; return its path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    path.write_text(_page(f"npu run {run.prep.source} --on rtl",
                          model_section(run, str(run.prep.source), floats)), encoding="utf-8")
    return path


def write_sim_report(directory, steps, runs):
    """Write ``DIR/index.html`` for ``npu sim``: the summary table, then every model run.

    Parameters
    ----------
    directory : path-like
    steps : list of (str, str, str)
        Summary rows: step, result (``pass`` / ``FAIL`` / ``skip``), detail.
    runs : list of (str, sim.model_run.ModelRun, list or None)
        Title, run, float outputs.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    body = ['<table><tr><th class="l">step</th><th class="l">result</th>'
            '<th class="l">detail</th></tr>']
    for step, result, detail in steps:
        cls = "ok" if result == "pass" else ("bad" if result == "FAIL" else "")
        body.append(f'<tr><td class="l">{_e(step)}</td><td class="l {cls}">{_e(result)}</td>'
                    f'<td class="l">{_e(detail)}</td></tr>')
    body.append("</table>")
    for title, run, floats in runs:
        body.append(model_section(run, title, floats))
    path = out / "index.html"
    path.write_text(_page("npu sim: models on the engine RTL", "\n".join(body)),
                    encoding="utf-8")
    return path
