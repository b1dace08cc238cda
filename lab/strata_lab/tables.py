"""Terminal tables (rich) and the Markdown summary, both from analysis.analyse()."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape as markup_escape
from rich.table import Table
from rich.text import Text

from . import stats
from .analysis import Analysis, CellResult, Comparison, Instructions
from .model import RunDoc
from .text import printable


def si(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    a = abs(x)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{x / div:.3g}{suffix}{(' ' + unit) if unit else ''}"
    return f"{x:.3g}{(' ' + unit) if unit else ''}"


def mib(kb: float | None) -> str:
    return "–" if kb is None else f"{kb / 1024:.1f} MiB"


def spread_pct(s) -> str:
    if s is None or s.ci_low is None or s.median == 0:
        return ""
    half = (s.ci_high - s.ci_low) / 2 / abs(s.median) * 100
    return f"±{half:.1f}%"


def ci_text(ci) -> str:
    return "" if not ci else f"[{ci[0]:.2f}–{ci[1]:.2f}]"


def escape(text: str) -> str:
    """A string the lab did not choose, for rich markup: no markup, no control characters (an
    escape sequence in a cell id rewrote the terminal)."""
    return markup_escape(printable(text))


def md(name: str) -> str:
    """A name (cell, variant) as a Markdown table cell: a '|' would end the column, a newline the
    row."""
    return printable(name).replace("|", "\\|")


def cell_label(c: CellResult) -> str:
    return printable(c.id) + (" ⚠ oversubscribed" if c.oversubscribed else "")


def throughput_table(an: Analysis, title: str | None = None) -> Table:
    base = an.baseline
    t = Table(title=title, show_lines=True, header_style="bold")
    t.add_column("cell (metric)", no_wrap=True)
    for v in an.variants:
        t.add_column(escape(v) + (" (baseline)" if v == base else ""), justify="right")
    for c in an.cells:
        hib = c.higher_is_better
        row = [Text(cell_label(c) + f"\n{c.metric} {'↑' if hib else '↓'}",
                    style="yellow" if c.oversubscribed else "")]
        for v in an.variants:
            e = c.by_variant[v]
            if not e.n:
                row.append(Text(f"FAILED ×{e.failures}" if e.failures else "–", style="bold red"))
                continue
            s = e.summary
            line1 = f"{si(s.median, c.unit)} {spread_pct(s)}"
            if v == base:
                line2 = "1.00×"
            else:
                line2 = f"{stats.fmt_ratio(e.speedup)} {ci_text(e.speedup_ci)}"
            style = ""
            if v != base and e.speedup_ci:
                lo, hi = e.speedup_ci
                style = "green" if lo > 1 else ("red" if hi < 1 else "")
            warn = " !" if e.warnings else ""
            row.append(Text(f"{line1}{warn}\n{line2}", style=style))
        t.add_row(*row)
    geo = ["geometric mean of speedups"]
    for v in an.variants:
        g = an.geomean.get(v)
        geo.append("–" if not g else f"{stats.fmt_ratio(g.speedup)} {ci_text(g.ci)}"
                   + (f"\n({g.cells}/{g.of} cells)" if g.cells != g.of else ""))
    t.add_row(*[Text(x, style="bold") for x in geo])
    return t


def rss_table(an: Analysis) -> Table:
    base = an.baseline
    t = Table(title="peak RSS (median; ratio to the baseline, < 1 is smaller)", show_lines=False,
              header_style="bold")
    t.add_column("cell", no_wrap=True)
    for v in an.variants:
        t.add_column(escape(v), justify="right")
    for c in an.cells:
        row = [escape(cell_label(c))]
        for v in an.variants:
            e = c.by_variant[v]
            if not e.rss:
                row.append("–")
                continue
            r = "" if v == base else f" {stats.fmt_ratio(e.rss_ratio)}"
            row.append(f"{mib(e.rss.median)}{r}")
        t.add_row(*row)
    return t


def faults_table(an: Analysis) -> Table | None:
    if not any(c.by_variant[v].minor_faults is not None for c in an.cells for v in an.variants):
        return None
    t = Table(title="minor page faults per sample (median)", header_style="bold")
    t.add_column("cell", no_wrap=True)
    for v in an.variants:
        t.add_column(escape(v), justify="right")
    for c in an.cells:
        t.add_row(escape(cell_label(c)), *[si(c.by_variant[v].minor_faults) for v in an.variants])
    return t


def instructions_table(an: Analysis) -> Table | None:
    rows = an.instructions or []
    if not rows:
        return None
    t = Table(title=f"instructions under cachegrind (deterministic; ratio to {escape(an.baseline)}, < 1 is fewer)",
              header_style="bold")
    t.add_column("cell", no_wrap=True)
    for v in an.variants:
        t.add_column(escape(v), justify="right")
    for r in rows:
        t.add_row(escape(r.cell), *[instructions_text(r.by_variant.get(v), v == an.baseline)
                               for v in an.variants])
    return t


def instructions_text(x: Instructions | None, is_base: bool) -> str:
    if not x:
        return "–"
    if x.failed:
        return f"FAILED ×{x.failed}"
    val = f"{si(x.value)} {x.unit}"
    return val if is_base or x.ratio is None else f"{val} {x.ratio:.3f}×"


def noise_line(an: Analysis) -> str:
    n = an.noise
    if not n.samples:
        return "noise: no counted samples"
    pct = lambda x: "unknown" if x is None else f"{x * 100:.1f} %"  # noqa: E731
    thr = n.threshold
    return (f"noise per sample (median share of its CPUs): other processes {pct(n.other_cpu_frac)}, "
            f"steal {pct(n.steal_frac)}; {n.noisy} of {n.samples} counted samples lost more "
            f"than {'the threshold' if thr is None else format(thr * 100, 'g') + ' %'}, "
            f"{n.reruns} re-run{'s' if n.reruns != 1 else ''}")


def convergence_lines(an: Analysis) -> list[str]:
    conv = an.convergence
    if not conv.cells:
        return []
    t = conv.target
    ok = sum(1 for x in conv.cells.values() if x.converged)
    goal = conv.converge
    which = ("" if set(goal) >= set(an.variants) - {an.baseline}
             else ", ".join(f"{v}/{an.baseline}" for v in goal) + " ")
    out = [f"{which}ratio intervals within ±{t * 100:g} %: {ok} of {len(conv.cells)} cells"]
    for v, (cid, hw) in conv.widest.items():
        out.append(f"widest {v}/{an.baseline} interval: ±{hw * 100:.1f} % ({cid})")
    for cid, why in conv.not_converged.items():
        out.append(f"not converged: {cid}: {why}")
    return out


def pareto_lines(an: Analysis, who: str = "strata") -> list[str]:
    """Cells where some peer is both faster and leaner than `who` (medians)."""
    if who not in an.variants:
        return []
    out = []
    for c in an.cells:
        e = c.by_variant[who]
        for p in c.pareto.dominating.get(who, []):
            q = c.by_variant[p]
            vs = c.pareto.versus.get(f"{p}/{who}")
            sp, mem = (vs.speed, vs.rss) if vs else (None, None)
            speed = (f"{sp.ratio:.2f}× {ci_text((sp.ci_low, sp.ci_high) if sp.ci_low is not None else None)}"
                     if sp else "faster")
            rss = (f"{mem.ratio:.2f}× {ci_text((mem.ci_low, mem.ci_high) if mem.ci_low is not None else None)}"
                   if mem else "less")
            sure = ("both intervals clear of 1" if vs.clear
                    else "within the noise: an interval includes 1")
            out.append(f"{c.id}: {p} is {speed} as fast as {who} with {rss} its peak RSS "
                       f"({mib(q.rss.median)} vs {mib(e.rss.median)}; {sure})")
    return out


def latency_table(an: Analysis) -> Table | None:
    rows = []
    for c in an.cells:
        for v in an.variants:
            for key, lat in c.by_variant[v].latency.items():
                if lat:
                    rows.append((c.id, v, key, lat))
    if not rows:
        return None
    t = Table(title="per-round P99 (P99 within each round, then across rounds)", header_style="bold")
    for col in ("cell", "variant", "metric", "rounds", "mean", "median", "std"):
        t.add_column(col, justify="right" if col in ("rounds", "mean", "median", "std") else "left")
    for cid, v, key, lat in rows:
        t.add_row(escape(cid), escape(v), key, str(lat.rounds), f"{lat.mean:.4g}", f"{lat.median:.4g}",
                  "–" if lat.std is None else f"{lat.std:.3g}")
    return t


def print_analysis(an: Analysis, console: Console, doc: RunDoc) -> None:
    console.print(throughput_table(an, title=f"{escape(doc.suite)}: median ± half 95 % interval; "
                                              f"speedup vs {escape(an.baseline)} [95 % interval], > 1 is better"))
    console.print(rss_table(an))
    ft = faults_table(an)
    if ft is not None:
        console.print(ft)
    lt = latency_table(an)
    if lt is not None:
        console.print(lt)
    it = instructions_table(an)
    if it is not None:
        console.print(it)
    console.print(noise_line(an), highlight=False, markup=False)
    for line in convergence_lines(an):
        console.print(printable(line), highlight=False, markup=False)
    dom = pareto_lines(an)
    if "strata" in an.variants:
        n = len({line.split(":", 1)[0] for line in dom})
        console.print(f"speed against memory: {n} cell{'s' if n != 1 else ''} where a peer is both faster "
                      "and leaner than strata (medians)" + (":" if dom else ""), markup=False)
        for line in dom:
            console.print(f"  • {printable(line)}", markup=False, highlight=False)
    if an.warnings:
        console.print("[bold yellow]warnings:[/]")
        for w in an.warnings:
            console.print(f"  [yellow]•[/] {escape(w)}", markup=True, highlight=False)


def compare_table(cmp: Comparison, a_name: str, b_name: str) -> Table:
    t = Table(title=f"B = {escape(b_name)} against A = {escape(a_name)} (two-sided Mann–Whitney U, α = {cmp.alpha})",
              header_style="bold")
    for col in ("cell", "variant", "A median", "B median", "B vs A", "p", "verdict"):
        t.add_column(col, justify="left" if col in ("cell", "variant", "verdict") else "right")
    for r in cmp.rows:
        style = ("green" if r.speedup > 1 else "red") if r.significant else ""
        verdict = r.verdict + (" (too few rounds to ever be significant)" if r.underpowered else "")
        t.add_row(escape(r.cell), escape(r.variant), si(r.a.median, r.unit), si(r.b.median, r.unit),
                  f"{stats.fmt_ratio(r.speedup)} {ci_text(r.speedup_ci)}",
                  "–" if r.p_value is None else f"{r.p_value:.3g}", Text(verdict, style=style))
    return t


def _rounds_text(an: Analysis, doc: RunDoc) -> str:
    ns = [c.by_variant[v].n for c in an.cells for v in an.variants if c.by_variant[v].n]
    planned = doc.settings.get("rounds")
    if not ns or min(ns) == max(ns) == planned:
        return str(planned)
    return f"{planned} minimum, {min(ns)}–{max(ns)} successful per cell and variant"


def markdown(an: Analysis, doc: RunDoc, extra: str = "") -> str:
    base = an.baseline
    m = doc.machine
    out = [f"# strata-lab: {doc.suite} — {doc.run_id}", ""]
    if not doc.complete:
        out += [f"**INCOMPLETE RUN** ({doc.interrupted or 'not finished'}): the numbers below "
                "cover only the samples that finished.", ""]
    out += [f"- machine: {m.get('cpu_model')}, {m.get('cores')} cores, kernel {m.get('kernel')}, "
            f"THP {m.get('thp_enabled')}, governor {m.get('cpu_governor')}, CONFIG_HZ {m.get('config_hz')}",
            f"- git: {doc.git.get('revision', '?')[:12]}{' (dirty)' if doc.git.get('dirty') else ''}",
            f"- {noise_line(an)}",
            f"- rounds: {_rounds_text(an, doc)}, warm-up: {doc.settings.get('warmup')}, "
            f"CPUs: {doc.settings.get('cpus')}, baseline: {base}",
            "- variants: " + "; ".join(f"{v} {(doc.variants[v] or {}).get('version', '')}".strip()
                                       for v in an.variants), "",
            f"## Primary metric: median ± half 95 % interval, speedup vs {base} (> 1 is better)", "",
            f"Speedups are medians of the per-round ratios (round k of a variant against round k of "
            f"{base}), with the exact order-statistic interval of that median.", "",
            "| cell | " + " | ".join(map(md, an.variants)) + " |",
            "|---|" + "---:|" * len(an.variants)]
    for c in an.cells:
        cols = []
        for v in an.variants:
            e = c.by_variant[v]
            if not e.n:
                cols.append(f"FAILED ×{e.failures}" if e.failures else "–")
                continue
            s = e.summary
            sp = "" if v == base else f" **{stats.fmt_ratio(e.speedup)}** {ci_text(e.speedup_ci)}"
            cols.append(f"{si(s.median, c.unit)} {spread_pct(s)}{sp}{' ⚠' if e.warnings else ''}")
        label = md(c.id) + (" ⚠ oversubscribed" if c.oversubscribed else "")
        out.append(f"| {label} ({c.metric}{' ↓' if not c.higher_is_better else ''}) | "
                   + " | ".join(cols) + " |")
    geo = []
    for v in an.variants:
        g = an.geomean.get(v)
        geo.append("–" if not g else f"**{stats.fmt_ratio(g.speedup)}** {ci_text(g.ci)}"
                   + (f" ({g.cells}/{g.of} cells)" if g.cells != g.of else ""))
    out += ["| geometric mean | " + " | ".join(geo) + " |", "",
            "## Peak RSS (median, ratio to the baseline: < 1 is smaller)", "",
            "| cell | " + " | ".join(map(md, an.variants)) + " |", "|---|" + "---:|" * len(an.variants)]
    for c in an.cells:
        cols = []
        for v in an.variants:
            e = c.by_variant[v]
            if not e.rss:
                cols.append("–")
            else:
                cols.append(mib(e.rss.median) + ("" if v == base else f" {stats.fmt_ratio(e.rss_ratio)}"))
        out.append(f"| {md(c.id)} | " + " | ".join(cols) + " |")
    if any(c.by_variant[v].minor_faults is not None for c in an.cells for v in an.variants):
        out += ["", "## Minor page faults per sample (median)", "",
                "| cell | " + " | ".join(map(md, an.variants)) + " |", "|---|" + "---:|" * len(an.variants)]
        for c in an.cells:
            out.append(f"| {md(c.id)} | " + " | ".join(si(c.by_variant[v].minor_faults)
                                                      for v in an.variants) + " |")
    if an.instructions:
        out += ["", f"## Instructions under cachegrind (ratio to {base}: < 1 is fewer)", "",
                "| cell | " + " | ".join(map(md, an.variants)) + " |", "|---|" + "---:|" * len(an.variants)]
        for r in an.instructions:
            out.append(f"| {md(r.cell)} | " + " | ".join(instructions_text(r.by_variant.get(v), v == base)
                                                        for v in an.variants) + " |")
    conv = convergence_lines(an)
    if conv:
        out += ["", "## Ratio intervals", ""] + [f"- {printable(x)}" for x in conv]
    if "strata" in an.variants:
        dom = pareto_lines(an)
        out += ["", "## Speed against memory", "",
                f"Cells where a peer is both faster and leaner than strata (medians): "
                f"{len({line.split(':', 1)[0] for line in dom})}."
                + ("" if dom else " None."), ""] + [f"- {printable(x)}" for x in dom]
        out += ["", "| cell | Pareto frontier (no other variant both faster and leaner) |", "|---|---|"]
        for c in an.cells:
            out.append(f"| {md(c.id)} | {', '.join(map(md, c.pareto.frontier)) or '–'} |")
    lat_rows = [(c.id, v, k, lat) for c in an.cells for v in an.variants
                for k, lat in c.by_variant[v].latency.items() if lat]
    if lat_rows:
        out += ["", "## Per-round P99", "", "| cell | variant | metric | rounds | mean | median | std |",
                "|---|---|---|---:|---:|---:|---:|"]
        for cid, v, k, lat in lat_rows:
            out.append(f"| {md(cid)} | {md(v)} | {k} | {lat.rounds} | {lat.mean:.4g} | {lat.median:.4g} | "
                       f"{'–' if lat.std is None else format(lat.std, '.3g')} |")
    if extra:
        out += ["", extra.strip()]
    if an.warnings:
        out += ["", "## Warnings", ""] + [f"- {printable(w)}" for w in an.warnings]
    return "\n".join(out) + "\n"
