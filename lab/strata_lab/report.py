"""report.html (self-contained: plots embedded as PNG data) and summary.md for a run."""

from __future__ import annotations

import base64
import html
import io
import math
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import TwoSlopeNorm  # noqa: E402

from . import results, tables  # noqa: E402
from .analysis import Analysis, CellResult  # noqa: E402
from .errors import LabError  # noqa: E402
from .model import RunDoc, Sample  # noqa: E402
from .text import printable  # noqa: E402

COLORS = plt.get_cmap("tab10").colors


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)  # the figures lay themselves out (constrained): no second draw for a tight box
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _grid(n: int, cols: int = 4, w: float = 4.0, h: float = 3.0):
    cols = max(1, min(cols, n))
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows + 0.6), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _color(variants, v):
    return COLORS[variants.index(v) % len(COLORS)]


def plot_throughput(an: Analysis) -> str:
    cells = an.cells
    fig, axes = _grid(len(cells))
    vs = an.variants
    for ax, c in zip(axes, cells):
        med, lo, hi = [], [], []
        for v in vs:
            s = c.by_variant[v].summary
            m = s.median if s else np.nan
            med.append(m)
            lo.append(m - s.ci_low if s and s.ci_low is not None else 0)
            hi.append(s.ci_high - m if s and s.ci_high is not None else 0)
        x = np.arange(len(vs))
        ax.bar(x, med, yerr=[lo, hi], capsize=3, color=[_color(vs, v) for v in vs])
        for i, v in enumerate(vs):
            if not c.by_variant[v].n:
                ax.text(i, 0, "failed", rotation=90, ha="center", va="bottom", color="red")
        ax.set_xticks(x, [printable(v) for v in vs], rotation=45, ha="right", fontsize=8)
        title = printable(c.id) + (" (oversubscribed)" if c.oversubscribed else "")
        ax.set_title(title, fontsize=9, color="darkorange" if c.oversubscribed else "black")
        ax.set_ylabel(f"{c.metric} ({c.unit}){'' if c.higher_is_better else ' ↓'}",
                      fontsize=8)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    fig.suptitle("primary metric: median with its order-statistic 95 % interval ((min, max) below 6 rounds)")
    return _png(fig)


def plot_heatmap(an: Analysis, key: str = "speedup", title: str = "") -> str:
    cells, vs = an.cells, an.variants
    data = np.full((len(cells), len(vs)), np.nan)
    for i, c in enumerate(cells):
        for j, v in enumerate(vs):
            x = getattr(c.by_variant[v], key)
            if x is not None:
                data[i, j] = x
    fig, ax = plt.subplots(figsize=(1.3 * len(vs) + 3, 0.45 * len(cells) + 1.5), layout="constrained")
    logs = np.log2(data)
    span = np.nanmax(np.abs(logs)) if np.isfinite(logs).any() else 1.0
    span = max(span, 0.1)
    cmap = plt.get_cmap("RdYlGn" if key == "speedup" else "RdYlGn_r").copy()
    cmap.set_bad("lightgrey")
    im = ax.imshow(np.ma.masked_invalid(logs), cmap=cmap, norm=TwoSlopeNorm(0, -span, span), aspect="auto")
    for i in range(len(cells)):
        for j in range(len(vs)):
            ax.text(j, i, "fail" if np.isnan(data[i, j]) else f"{data[i, j]:.2f}", ha="center",
                    va="center", fontsize=8)
    ax.set_xticks(range(len(vs)), [printable(v) for v in vs], rotation=30, ha="right")
    ax.set_yticks(range(len(cells)), [printable(c.id) + (" ⚠" if c.oversubscribed else "") for c in cells])
    cb = fig.colorbar(im, ax=ax)
    cb.set_label("log2 of the ratio")
    ax.set_title(title)
    return _png(fig)


def plot_rss(an: Analysis) -> str:
    cells, vs = an.cells, an.variants
    fig, axes = _grid(len(cells))
    for ax, c in zip(axes, cells):
        med = [c.by_variant[v].rss.median / 1024 if c.by_variant[v].rss else np.nan for v in vs]
        ax.bar(range(len(vs)), med, color=[_color(vs, v) for v in vs])
        ax.set_xticks(range(len(vs)), [printable(v) for v in vs], rotation=45, ha="right", fontsize=8)
        ax.set_title(printable(c.id), fontsize=9)
        ax.set_ylabel("peak RSS (MiB)", fontsize=8)
    fig.suptitle("peak RSS, median over rounds")
    return _png(fig)


def plot_pareto(an: Analysis) -> str | None:
    """Per cell: primary metric against peak RSS for every variant (medians), the Pareto frontier
    (variants no other beats on both) joined by a line.  Better is up and to the left."""
    cells = [c for c in an.cells if len(c.pareto.frontier) + len(c.pareto.dominating) > 0]
    if not cells:
        return None
    vs = an.variants
    fig, axes = _grid(len(cells))
    for ax, c in zip(axes, cells):
        hib = c.higher_is_better
        pts = {}
        for v in vs:
            e = c.by_variant[v]
            if e.summary and e.rss:
                pts[v] = (e.rss.median / 1024, e.summary.median)
        for v, (x, y) in pts.items():
            dominated = v in c.pareto.dominating
            ax.scatter([x], [y], s=70 if v == "strata" else 40, marker="*" if v == "strata" else "o",
                       color=_color(vs, v), edgecolors="black" if not dominated else "none",
                       alpha=0.5 if dominated else 1.0, label=printable(v), zorder=3)
        front = sorted((pts[v] for v in c.pareto.frontier if v in pts), key=lambda p: p[0])
        if len(front) > 1:
            ax.plot([p[0] for p in front], [p[1] for p in front], color="grey", lw=1, ls="--", zorder=2)
        if not hib:
            ax.invert_yaxis()  # better stays up
        ax.set_title(printable(c.id), fontsize=9)
        ax.set_xlabel("peak RSS (MiB)", fontsize=8)
        ax.set_ylabel(f"{c.metric} ({c.unit}){'' if hib else ', axis inverted'}", fontsize=8)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    axes[0].legend(fontsize=7)
    fig.suptitle("speed against memory (medians): better is up and to the left; dashed: Pareto frontier, "
                 "faded: dominated")
    return _png(fig)


def _representative(doc: RunDoc, cell: CellResult, v: str) -> Sample | None:
    """The counted sample whose primary metric is closest to the median: a typical curve."""
    ok = [s for s in doc.counted(cell.id, v) if (s.rss_timeline or {}).get("t_ms")]
    if not ok:
        return None
    med = float(np.median([s.metrics[cell.metric] for s in ok]))
    return min(ok, key=lambda s: abs(s.metrics[cell.metric] - med))


def plot_rss_timelines(doc: RunDoc, an: Analysis) -> str | None:
    cells, vs = an.cells, an.variants
    drawn = [c for c in cells if any(_representative(doc, c, v) for v in vs)]
    if not drawn:
        return None
    fig, axes = _grid(len(drawn))
    for ax, c in zip(axes, drawn):
        for v in vs:
            s = _representative(doc, c, v)
            if s:
                tl = s.rss_timeline
                ax.plot(np.asarray(tl["t_ms"]) / 1000, np.asarray(tl["rss_kb"]) / 1024, label=printable(v),
                        color=_color(vs, v), lw=1.2)
        ax.set_title(printable(c.id), fontsize=9)
        ax.set_xlabel("seconds", fontsize=8)
        ax.set_ylabel("RSS (MiB)", fontsize=8)
    axes[0].legend(fontsize=7)
    fig.suptitle("RSS over time (sampled every ~10 ms; the sample closest to the median)")
    return _png(fig)


def plot_scaling(doc: RunDoc, an: Analysis) -> str | None:
    by_workload: dict[str, list] = {}
    for c in an.cells:
        by_workload.setdefault(c.workload, []).append(c)
    groups = {w: sorted(cs, key=lambda c: c.threads) for w, cs in by_workload.items()
              if len({c.threads for c in cs}) > 1}
    if not groups:
        return None
    vs = an.variants
    ncpu = len(doc.settings.get("cpus") or []) or os.cpu_count()
    fig, axes = _grid(len(groups))
    for ax, (w, cs) in zip(axes, groups.items()):
        for v in vs:
            xs, ys, lo, hi = [], [], [], []
            for c in cs:
                s = c.by_variant[v].summary
                if s:
                    xs.append(c.threads)
                    ys.append(s.median)
                    lo.append(s.median - (s.ci_low if s.ci_low is not None else s.median))
                    hi.append((s.ci_high if s.ci_high is not None else s.median) - s.median)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=printable(v), color=_color(vs, v))
        ax.axvspan(ncpu + 0.5, max(c.threads for c in cs) + 0.5, color="orange", alpha=0.12,
                   label="oversubscribed") if max(c.threads for c in cs) > ncpu else None
        ax.set_title(printable(w), fontsize=9)
        ax.set_xlabel("threads", fontsize=8)
        ax.set_ylabel(f"{cs[0].metric} ({cs[0].unit})", fontsize=8)
        ax.set_xticks(sorted({c.threads for c in cs}))
    axes[0].legend(fontsize=7)
    fig.suptitle("thread scaling (median, 95 % interval)")
    return _png(fig)


def _image(alt: str, src: str, base: Path | None) -> str:
    """An image a suite's summary links (E-replay's trace-stats.png beside the results): embedded
    when the file is there, so report.html stays self-contained; else linked as given."""
    path = base / src if base is not None and Path(src).name == src else None  # a file beside it only
    if path is not None and path.suffix == ".png" and path.is_file():
        src = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    return f"<img alt='{html.escape(alt)}' src='{html.escape(src)}'>"


def _md_to_html(md: str, base: Path | None = None) -> str:
    """Enough Markdown for our own summaries: headings, tables (with \\| for a '|' in a cell),
    bullets, bold, images (relative to base), paragraphs."""
    import re

    out, table = [], []

    def inline(t: str) -> str:
        parts = re.split(r"!\[([^\]]*)\]\(([^)\s]+)\)", t)  # text, alt, src, text, ...
        return "".join(re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(x)) if k % 3 == 0
                       else _image(x, parts[k + 1], base) if k % 3 == 1 else ""
                       for k, x in enumerate(parts))

    def flush():
        if table:
            rows = [r for r in table if not re.match(r"^\|[-:| ]+\|$", r)]
            out.append("<table>")
            for k, r in enumerate(rows):
                tag = "th" if k == 0 else "td"
                cells = [x.strip().replace("\\|", "|")
                         for x in re.split(r"(?<!\\)\|", r.strip().strip("|"))]
                out.append("<tr>" + "".join(f"<{tag}>{inline(x)}</{tag}>" for x in cells) + "</tr>")
            out.append("</table>")
            table.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level + 1}>{inline(line.lstrip('#').strip())}</h{level + 1}>")
        elif line.startswith("- "):
            out.append(f"<ul><li>{inline(line[2:])}</li></ul>")
        elif line.strip():
            out.append(f"<p>{inline(line)}</p>")
    flush()
    return "\n".join(out)


CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1500px}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}td:first-child,th:first-child{text-align:left}img{max-width:100%}
.warn{background:#fff4e0;border-left:4px solid orange;padding:.5em 1em}.bad{color:#b00;font-weight:bold}"""


def render_html(doc: RunDoc, an: Analysis, extra_md: str) -> str:
    # Cell ids (a replayed trace's file name), variant names and units are drawn as they are: with
    # matplotlib's mathtext, a '$' pair in one is TeX, and a bad one ends the report with a traceback.
    with matplotlib.rc_context({"text.parse_math": False}):
        return _render_html(doc, an, extra_md)


def _render_html(doc: RunDoc, an: Analysis, extra_md: str) -> str:
    md = tables.markdown(an, doc, extra_md)
    m = doc.machine
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>strata-lab {html.escape(doc.run_id)}"
             f"</title><style>{CSS}</style></head><body>"]
    if not doc.complete:
        parts.append("<p class='bad'>INCOMPLETE RUN: only the samples that finished are shown.</p>")
    parts.append(_md_to_html(md, Path(doc.path).parent if doc.path else None))
    parts.append("<h2>Machine</h2><table>" + "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>" for k, v in m.items()) + "</table>")
    parts.append("<h2>Variants</h2><table><tr><th>name</th><th>version</th><th>library</th><th>source</th></tr>" + "".join(
        f"<tr><td>{html.escape(printable(v))}</td><td>{html.escape(str(i.get('version', '')))}</td>"
        f"<td>{html.escape(printable(str(i.get('library') or i.get('args') or '')))}</td>"
        f"<td>{html.escape(str(i.get('source', i.get('kind', ''))))}</td></tr>"
        for v, i in doc.variants.items()) + "</table>")
    figs = [("Throughput with intervals", plot_throughput(an)),
            (f"Speedup against {an.baseline} (> 1 is better)",
             plot_heatmap(an, "speedup", f"speedup vs {printable(an.baseline)}")),
            (f"Peak RSS against {an.baseline} (< 1 is smaller)",
             plot_heatmap(an, "rss_ratio", f"peak RSS ratio vs {printable(an.baseline)}")),
            ("Peak RSS", plot_rss(an)),
            ("Speed against memory (Pareto frontier)", plot_pareto(an)),
            ("RSS over time", plot_rss_timelines(doc, an)),
            ("Thread scaling", plot_scaling(doc, an))]
    for title, png in figs:
        if png:
            parts.append(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' src='data:image/png;base64,{png}'>")
    failures = [s for s in doc.samples if not s.ok]
    if failures:
        parts.append("<h2>Failures</h2><table><tr><th>cell</th><th>variant</th><th>round</th><th>kind</th>"
                     "<th>exit status</th><th>message / stderr tail</th></tr>")
        for s in failures:
            f = s.failure or {}
            parts.append(f"<tr><td>{html.escape(printable(s.cell))}</td><td>{html.escape(printable(s.variant))}</td>"
                         f"<td>{'warm-up' if s.warmup else s.round}</td><td>{html.escape(str(f.get('kind')))}</td>"
                         f"<td>{html.escape(str(f.get('exit_status')))}</td><td style='text-align:left'>"
                         f"{html.escape(str(f.get('message')))}<pre>{html.escape(str(f.get('stderr_tail', ''))[-800:])}</pre></td></tr>")
        parts.append("</table>")
    parts.append(f"<p>results: {html.escape(printable(str(doc.path or 'results.json')))}; schema "
                 f"{doc.schema} v{doc.schema_version}; lab {html.escape(str(doc.lab_version))}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write(doc: RunDoc, an: Analysis, run_dir: Path, extra_md: str = "") -> tuple[Path, Path]:
    """summary.md and report.html beside the results (<name>.summary.md and <name>.report.html
    for a results file not called results.json, so two in one folder keep their own)."""
    run_dir = Path(run_dir)
    where = run_dir / (Path(doc.path).name if doc.path else results.FILENAME)
    md_path, html_path = results.beside(where, "summary.md"), results.beside(where, "report.html")
    for path, text in ((md_path, tables.markdown(an, doc, extra_md)), (html_path, render_html(doc, an, extra_md))):
        try:
            results.write_text_atomic(path, text, "." + path.name + "-")
        except OSError as e:
            # A run directory the user may not write to (or a directory of that name): one line
            # that says the results are kept, not a traceback after the run.
            raise LabError(f"cannot write {path}: {e.strerror}; the results are in "
                           f"{doc.path or run_dir}") from None
    return html_path, md_path
