"""Bench reports: a rich table on the terminal; ``bench.json``, ``bench.csv``, ``bench.md`` and
``bench.png`` in an output directory (each written atomically).

While a run goes on, its rows so far are saved after every batch size (``write_partial``), each
file marked partial: ``meta.partial`` in the JSON, a ``partial`` column in the CSV, a banner in
the Markdown. They take the report's own names where the directory holds no complete report,
else ``bench.partial.*`` beside it, so a run cut short never replaces a complete report. A run
that finishes writes all four files and removes ``bench.partial.*``.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ttball.bench.profiling import CATEGORIES
from ttball.bench.runner import ROW_KEYS, BenchResult
from ttball.results import atomic_write, write_json


def _f(value: Any, spec: str = ".2f") -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float | int):
        return format(value, spec)
    return str(value)


def _pct(value: Any) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def _first_call(row: dict[str, Any]) -> str:
    cold, warm = row["first_call_s"], row["first_call_warm_s"]
    return _f(cold) + (f" / {_f(warm)}" if warm is not None else "")


def _count(row: dict[str, Any]) -> str:
    if row["kernels_per_call"] is not None:
        return _f(row["kernels_per_call"], ".0f")
    ops = sum(row[f"prof_{c}_n"] or 0 for c in CATEGORIES) if row["prof_total_ms"] else None
    return _f(ops, ".0f")


# (header, cell) for the main table, shared by the terminal and Markdown.
MAIN_COLUMNS: list[tuple[str, Any]] = [
    ("variant", lambda r: r["variant"]),
    ("batch", lambda r: _f(r["batch"], "d")),
    ("median ms", lambda r: _f(r["median_ms"], ".3f")),
    (
        "min–max ms",
        lambda r: (
            f"{_f(r['min_ms'], '.3f')}–{_f(r['max_ms'], '.3f')}" if r["min_ms"] is not None else ""
        ),
    ),
    ("windows/s", lambda r: _f(r["windows_per_s"], ".1f")),
    ("frames/s", lambda r: _f(r["frames_per_s"], ".1f")),
    ("× eager FP32", lambda r: _f(r["speedup_vs_eager_fp32"])),
    ("× same prec.", lambda r: _f(r["speedup_vs_same_precision"])),
    ("first call s (cold / warm)", _first_call),
    ("kernels or ops / call", _count),
    ("peak MB", lambda r: _f(r["peak_mem_mb"], ".0f")),
    ("% FLOP ceiling", lambda r: _pct(r["flop_share"])),
    ("% BW floor", lambda r: _pct(r["bw_share"])),
    ("rel err", lambda r: _f(r["rel_err"], ".1e")),
    ("max abs err", lambda r: _f(r["max_abs_err"], ".1e")),
    ("ok", lambda r: _f(r["within_tolerance"])),
    ("flips", lambda r: _f(r.get("verify_flips"), "d")),
    ("p99 px", lambda r: _f(r.get("verify_p99_px"), ".3f")),
    ("verified", lambda r: _f(r.get("verify_passed"))),
]
TERMINAL_SKIPS = {"frames/s", "max abs err"}


def _ran(result: BenchResult) -> list[dict[str, Any]]:
    return [r for r in result.rows if r["status"] == "ok"]


def _not_ran(result: BenchResult) -> list[dict[str, Any]]:
    return [r for r in result.rows if r["status"] != "ok"]


def print_table(result: BenchResult) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"ttball bench on {result.meta.get('device_name', '')}")
    columns = [(h, c) for h, c in MAIN_COLUMNS if h not in TERMINAL_SKIPS]
    for header, _ in columns:
        table.add_column(header, justify="left" if header == "variant" else "right")
    for row in _ran(result):
        table.add_row(*(cell(row) for _, cell in columns))
    console = Console()
    if not console.is_terminal:  # a log file: don't squeeze the table into 80 columns
        console = Console(width=220)
    console.print(table)
    for row in _not_ran(result):
        batch = f" (batch {row['batch']})" if row["batch"] is not None else ""
        console.print(f"[yellow]{row['variant']}{batch}: {row['status']}[/]: {row['reason']}")


def _csv(result: BenchResult) -> str:
    """The rows under ROW_KEYS; a partial report's have a last column ``partial`` (True)."""
    partial = bool(result.meta.get("partial"))
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=list(ROW_KEYS) + (["partial"] if partial else []))
    writer.writeheader()
    writer.writerows({**r, "partial": True} if partial else r for r in result.rows)
    return out.getvalue()


def write_csv(path: Path, result: BenchResult) -> None:
    with atomic_write(path) as f:
        f.write(_csv(result))


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    out.write("| " + " | ".join(headers) + " |\n")
    out.write("|" + "---|" * len(headers) + "\n")
    for r in rows:
        out.write("| " + " | ".join(r) + " |\n")
    return out.getvalue()


PARTIAL_BANNER = (
    "**PARTIAL: the rows measured so far; the run had not finished when this was written.**"
)


def _md_header(meta: dict[str, Any]) -> str:
    plan = meta.get("plan", {})
    ceilings = meta.get("ceilings", {})
    compute = ", ".join(
        f"{k.rsplit('_', 1)[-1].upper()} {v:.2f}"
        for k, v in ceilings.items()
        if k.startswith("compute")
    )
    batches = ", ".join(str(b) for b in meta.get("batches", []))
    lines = [
        f"# ttball bench: {meta.get('device_name', '')}",
        "",
        (
            f"- Machine: {meta.get('device_name', '')} ({meta.get('device', '')}); "
            f"{meta.get('platform', '')}"
        ),
        f"- Versions: torch {meta.get('torch_version', '')}"
        + (f", CUDA {meta['cuda_version']}" if meta.get("cuda_version") else "")
        + (f", driver {meta['driver_version']}" if meta.get("driver_version") else "")
        + f", ttball {meta.get('ttball_version', '')}; TF32 {'on' if meta.get('tf32') else 'off'}",
        f"- Date: {meta.get('date', '')}",
        f"- Command: `{meta.get('command', '')}`",
        (
            f"- Input: ({batches}) × 9 × {meta.get('height')} × {meta.get('width')}, random normal; "
            f"weights: {meta.get('weights', '')}"
        ),
        (
            f"- Method: {plan.get('warmup')} warm-up calls, then {plan.get('groups')} groups of "
            f"{plan.get('calls')} calls; median of the group means (min–max of the group means). "
            "CUDA events on GPUs, perf_counter on CPU. The batch is already on the device "
            "(host→device copies excluded); the backend's input cast and FP32 output are included. "
            "First call: cold with an empty cache directory / warm with a second instance on the "
            "same cache after torch.compiler.reset()."
        ),
        (
            f"- Work per window: {meta.get('gflop_per_window', 0):.1f} GFLOP; per-layer memory "
            f"floor {meta.get('floor_mb_per_window_fp16', 0):.0f} MB in FP16 (each conv's input + "
            "output once)."
        ),
        (
            f"- Ceilings measured in this run: copy bandwidth "
            f"{ceilings.get('bandwidth_gbps', 0):.1f} GB/s; matmul TFLOP/s {compute}."
        ),
        (
            "- Errors: against eager FP32 on the same input (rel = ‖out − ref‖ / ‖ref‖); ok = "
            "within the precision's tolerance (ttball/bench/accuracy.py)."
        ),
        "",
    ]
    if meta.get("partial"):
        lines[2:2] = [PARTIAL_BANNER, ""]
    return "\n".join(lines)


def markdown(result: BenchResult) -> str:
    ran = _ran(result)
    parts = [_md_header(result.meta)]
    parts.append(
        _md_table(
            [h for h, _ in MAIN_COLUMNS], [[cell(r) for _, cell in MAIN_COLUMNS] for r in ran]
        )
    )
    if ran and any(r["prof_total_ms"] for r in ran):
        unit = ran[0]["prof_unit"] or ""
        parts.append(f"\n## Time by category, ms per call ({unit}; count in brackets)\n\n")
        headers = ["variant", "batch", "total"] + list(CATEGORIES)
        body = [
            [r["variant"], _f(r["batch"], "d"), _f(r["prof_total_ms"], ".3f")]
            + [
                f"{_f(r[f'prof_{c}_ms'], '.3f')} ({_f(r[f'prof_{c}_n'], '.0f')})"
                for c in CATEGORIES
            ]
            for r in ran
            if r["prof_total_ms"] is not None
        ]
        parts.append(_md_table(headers, body))
    skipped = _not_ran(result)
    if skipped:
        parts.append("\n## Not run here\n\n")
        parts.append(
            _md_table(
                ["variant", "batch", "status", "reason"],
                [
                    [
                        r["variant"],
                        _f(r["batch"], "d"),
                        r["status"],
                        (r["reason"] or "").replace("|", "/"),
                    ]
                    for r in skipped
                ],
            )
        )
    return "".join(parts)


def write_markdown(path: Path, result: BenchResult) -> None:
    with atomic_write(path) as f:
        f.write(markdown(result))


def write_png(path: Path, result: BenchResult) -> None:
    with atomic_write(path, "wb") as f:
        f.write(_png(result))


def _png(result: BenchResult) -> bytes:
    """Left: median latency per variant at the smallest batch (min–max bars). Right: windows/s
    against batch size, one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = _ran(result)
    batches = sorted({r["batch"] for r in ran})
    first = [r for r in ran if batches and r["batch"] == batches[0]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, max(4, 0.3 * len(first) + 2)))
    names = [r["variant"] for r in first]
    med = [r["median_ms"] for r in first]
    err = [
        [r["median_ms"] - r["min_ms"] for r in first],
        [r["max_ms"] - r["median_ms"] for r in first],
    ]
    left.barh(names, med, xerr=err, color="tab:blue")
    left.invert_yaxis()
    left.set_xlabel(f"median ms per call, batch {batches[0] if batches else '-'}")
    left.set_title("Latency")
    right.set_prop_cycle(color=plt.get_cmap("tab20").colors)  # type: ignore[attr-defined]  # a ListedColormap
    for name in dict.fromkeys(r["variant"] for r in ran):
        pts = sorted((r["batch"], r["windows_per_s"]) for r in ran if r["variant"] == name)
        right.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    right.set_xlabel("batch size (windows per call)")
    right.set_ylabel("windows/s")
    right.set_title("Throughput")
    if len(batches) > 1:
        right.set_xscale("log", base=2)
    right.set_xticks(batches, [str(b) for b in batches])
    if ran:
        right.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(
        f"ttball bench: {result.meta.get('device_name', '')}, "
        f"{result.meta.get('height')}×{result.meta.get('width')}"
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


REPORT_EXTENSIONS = ("json", "csv", "md", "png")  # what write_reports writes: bench.<ext>
PARTIAL_NAME = "bench.partial"  # a partial report beside a complete one: bench.partial.<ext>
PARTIAL_EXTENSIONS = ("json", "csv", "md")  # what write_partial writes (no plot)


def partial_name(out_dir: Path) -> str:
    """The name a run's partial reports take in ``out_dir``: ``bench`` where it holds no report
    or only a partial one (an earlier run cut short), else ``PARTIAL_NAME``, beside the complete
    report that they must not replace."""
    if not any((out_dir / f"bench.{ext}").exists() for ext in REPORT_EXTENSIONS):
        return "bench"
    try:
        meta = json.loads((out_dir / "bench.json").read_text())["meta"]
        partial = meta.get("partial") is True
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        partial = False  # not a report of ours that we know to be partial: keep it
    return "bench" if partial else PARTIAL_NAME


def write_partial(out_dir: Path, result: BenchResult, name: str = "bench") -> None:
    """JSON, CSV and Markdown of the rows so far as ``name.<ext>`` (rewritten after every batch
    size), each marked partial when ``result.meta["partial"]`` is; under the report's own names
    an earlier run's ``bench.png`` goes, as it would not match them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / f"{name}.json", {"meta": result.meta, "rows": result.rows})
    write_csv(out_dir / f"{name}.csv", result)
    write_markdown(out_dir / f"{name}.md", result)
    if name == "bench":
        (out_dir / "bench.png").unlink(missing_ok=True)


def write_reports(out_dir: Path, result: BenchResult) -> dict[str, Path]:
    """``bench.<ext>`` for each of REPORT_EXTENSIONS, then no ``bench.partial.*``. Everything is
    rendered before the first file is replaced, so that a run cut short while plotting leaves
    the earlier files as they were, not some new and some old."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {ext: out_dir / f"bench.{ext}" for ext in REPORT_EXTENSIONS}
    png, table, md = _png(result), _csv(result), markdown(result)
    write_json(paths["json"], {"meta": result.meta, "rows": result.rows})
    for ext, text in (("csv", table), ("md", md)):
        with atomic_write(paths[ext]) as f:
            f.write(text)
    with atomic_write(paths["png"], "wb") as f:
        f.write(png)
    for ext in PARTIAL_EXTENSIONS:
        (out_dir / f"{PARTIAL_NAME}.{ext}").unlink(missing_ok=True)
    return paths
