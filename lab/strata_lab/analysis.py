"""From a results document to the numbers tables and reports show: per cell and variant the
median with its interval, speedup and memory ratio against the baseline, per-round P99 of latency
metrics, the geometric mean across cells, and every warning a reader must see."""

from __future__ import annotations

from collections import defaultdict

from . import stats
from .errors import LabError


BUSY_WARN = 0.10  # share of all CPUs used by other processes during samples


def counted(doc: dict, cell_id: str, variant: str) -> list[dict]:
    return [s for s in doc["samples"] if s["cell"] == cell_id and s["variant"] == variant
            and not s.get("warmup")]


def analyse(doc: dict, baseline: str | None = None) -> dict:
    variants = list(doc["variants"])
    baseline = baseline or doc["settings"].get("baseline") or variants[0]
    if baseline not in variants:
        raise LabError(f"baseline {baseline!r} is not among this run's variants: {', '.join(variants)}")
    rounds_planned = doc["settings"].get("rounds", 0)
    warnings: list[str] = []
    if not doc.get("complete"):
        why = f" ({doc['interrupted']})" if doc.get("interrupted") else ""
        warnings.append(f"INCOMPLETE run{why}: {len([s for s in doc['samples'] if not s.get('warmup')])} "
                        f"of {doc['settings'].get('planned_samples', '?')} planned samples finished "
                        f"(warm-ups included in the plan)")
    cells_out = []
    few: list[str] = []
    geo_pairs: dict[str, list] = defaultdict(list)
    for c in doc["cells"]:
        hib = c.get("higher_is_better", True)
        per_v = {}
        for v in variants:
            samples = counted(doc, c["id"], v)
            ok = [s for s in samples if s.get("ok")]
            failed = [s for s in samples if not s.get("ok")]
            entry: dict = {"n": len(ok), "failures": len(failed),
                           "failure_messages": sorted({f"{s['failure']['kind']}: {s['failure']['message']}"
                                                       for s in failed if s.get("failure")}),
                           "values": [s["metrics"][c["metric"]] for s in ok],
                           "summary": None, "rss": None, "latency": {}, "warnings": []}
            if ok:
                entry["summary"] = stats.summarize(entry["values"])
                rss_vals = [s["peak_rss_kb"] for s in ok if s.get("peak_rss_kb") is not None]
                entry["rss_values"] = rss_vals
                entry["rss"] = stats.summarize(rss_vals) if rss_vals else None
                entry["warnings"] = stats.spread_warnings(entry["summary"], max(stats.MIN_ROUNDS, 1))
                for key in c.get("latency_metrics") or ():
                    entry["latency"][key] = stats.per_round_p99([s["metrics"].get(key) for s in ok])
            if failed:
                entry["warnings"].append(f"{len(failed)} failed sample{'s' if len(failed) > 1 else ''}")
            per_v[v] = entry
        base = per_v[baseline]
        for v, entry in per_v.items():
            entry["speedup"] = entry["speedup_ci"] = entry["rss_ratio"] = entry["rss_ratio_ci"] = None
            entry["p_value"] = None
            if entry["n"] and base["n"]:
                entry["speedup"] = stats.speedup(entry["values"], base["values"], hib)
                entry["speedup_ci"] = stats.speedup_ci(entry["values"], base["values"], hib)
                if v != baseline:
                    entry["p_value"] = stats.mann_whitney(entry["values"], base["values"])
                    geo_pairs[v].append((entry["values"], base["values"], hib))
                else:  # the baseline against itself is 1 by definition, not a resampled ratio
                    entry["speedup_ci"] = (1.0, 1.0)
                    geo_pairs[v].append(None)
                if entry.get("rss_values") and base.get("rss_values"):
                    entry["rss_ratio"] = stats.ratio(entry["rss_values"], base["rss_values"])
                    entry["rss_ratio_ci"] = stats.ratio_ci(entry["rss_values"], base["rss_values"])
        cells_out.append({**c, "by_variant": per_v})
        if c.get("oversubscribed"):
            warnings.append(f"{c['id']}: oversubscribed ({c['threads']} threads on "
                            f"{len(c['cpus']) if c.get('cpus') else len(doc['settings'].get('cpus') or [])} CPUs)")
        wide = []
        for v, entry in per_v.items():
            for w in entry["warnings"]:
                if w.startswith("only "):
                    few.append(f"{c['id']}/{v} ({entry['n']})")
                elif w.startswith("wide spread"):
                    wide.append(f"{v} {entry['summary'].cv * 100:.0f} %")
                else:
                    warnings.append(f"{c['id']} / {v}: {w}")
            for m in entry["failure_messages"]:
                warnings.append(f"{c['id']} / {v}: failure — {m}")
        if wide:
            warnings.append(f"{c['id']}: wide spread (CV > {stats.CV_WARN * 100:.0f} %) for " + ", ".join(wide))
    busy = [s["other_cpu_frac"] for s in doc["samples"] if s.get("other_cpu_frac") is not None
            and not s.get("warmup")]
    other_cpu = float(stats.median(busy)) if busy else None
    if other_cpu is not None and other_cpu > BUSY_WARN:
        warnings.insert(0, f"BUSY MACHINE: other processes used a median {other_cpu * 100:.0f} % of all "
                           f"CPUs while the samples ran; expect noise and rerun on a quiet machine")
    if few:
        warnings.append(f"fewer than {stats.MIN_ROUNDS} successful rounds in {len(few)} cell/variant "
                        f"pairs: " + ", ".join(few[:8]) + (" …" if len(few) > 8 else ""))
    if rounds_planned < stats.MIN_ROUNDS:
        warnings.append(f"only {rounds_planned} rounds per cell were planned (< {stats.MIN_ROUNDS}): "
                        "intervals and tests are weak")
    geo = {}
    for v in variants:
        pairs = geo_pairs.get(v, [])
        if not pairs:
            geo[v] = None
            continue
        if v == baseline:
            geo[v] = {"speedup": 1.0, "ci": (1.0, 1.0), "cells": len(pairs), "of": len(doc["cells"])}
            continue
        sp = [stats.speedup(a, b, h) for a, b, h in pairs]
        geo[v] = {"speedup": stats.geomean(sp), "ci": stats.geomean_speedup_ci(pairs),
                  "cells": len(pairs), "of": len(doc["cells"])}
    return {"baseline": baseline, "variants": variants, "cells": cells_out, "geomean": geo,
            "warnings": warnings, "other_cpu_frac": other_cpu}


def compare(a: dict, b: dict, alpha: float = 0.05) -> dict:
    """Cell by cell and variant by variant, B against A: the change of the median and whether the
    samples differ significantly (two-sided Mann–Whitney U at `alpha`)."""
    a_cells = {c["id"]: c for c in a["cells"]}
    rows, notes = [], []
    for c in b["cells"]:
        if c["id"] not in a_cells:
            notes.append(f"{c['id']}: only in B")
            continue
        ca = a_cells[c["id"]]
        if ca.get("metric") != c.get("metric"):
            notes.append(f"{c['id']}: different metrics ({ca.get('metric')} vs {c.get('metric')}), skipped")
            continue
        hib = c.get("higher_is_better", True)
        for v in b["variants"]:
            if v not in a["variants"]:
                continue
            va = [s["metrics"][c["metric"]] for s in counted(a, c["id"], v) if s.get("ok")]
            vb = [s["metrics"][c["metric"]] for s in counted(b, c["id"], v) if s.get("ok")]
            if not va or not vb:
                notes.append(f"{c['id']} / {v}: no successful samples in {'A' if not va else 'B'}")
                continue
            p = stats.mann_whitney(va, vb)
            sp = stats.speedup(vb, va, hib)
            sig = p is not None and p < alpha
            verdict = ("faster" if sp > 1 else "slower") if sig else "no significant difference"
            if sig and not hib:
                verdict = "better" if sp > 1 else "worse"
            min_p = _min_possible_p(len(va), len(vb))
            rows.append({"cell": c["id"], "variant": v, "unit": c.get("unit", ""),
                         "a": stats.summarize(va), "b": stats.summarize(vb), "speedup": sp,
                         "speedup_ci": stats.speedup_ci(vb, va, hib), "p_value": p,
                         "significant": sig, "verdict": verdict,
                         "underpowered": min_p >= alpha})
    for c in a["cells"]:
        if c["id"] not in {x["id"] for x in b["cells"]}:
            notes.append(f"{c['id']}: only in A")
    return {"rows": rows, "notes": notes, "alpha": alpha}


def _min_possible_p(n1: int, n2: int) -> float:
    """Smallest two-sided exact Mann–Whitney p-value with these sample sizes: 2 / C(n1+n2, n1)."""
    from math import comb

    return min(1.0, 2 / comb(n1 + n2, n1))
