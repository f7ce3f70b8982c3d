"""``verify.md``: the report for people, from the same dict as ``verify.json``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ttball.verify._report import VerifyReport


def _f(value: Any, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_f(v) for v in row) + " |" for row in rows]
    return lines + [""]


def _agreement_rows(name: str, a: dict[str, Any]) -> list[Any]:
    hm, det, trk = a["heatmaps"], a["detections"], a["track"]
    pos = det["position_diff_px"]
    return [
        name,
        hm["heatmaps"],
        hm["logit_max_abs"],
        hm["logit_rel"],
        hm["prob_max_abs"],
        hm["prob_rel"],
        f"{hm['peak_moved_with_ball']}/{hm['with_ball']} ({hm['peak_moved']})",
        det["flips"],
        det["both_visible"],
        pos["median"],
        pos["p95"],
        pos["p99"],
        pos["max"],
        det["angle_diff_deg"]["p99"],
        det["length_diff_px"]["p99"],
        trk["visibility_flips"],
        trk["differing"],
    ]


AGREEMENT_NOTE = (
    "Positions in original-frame pixels; heatmaps are those the stream uses (step 3: each kept "
    "frame once). Peak moved: heatmaps whose argmax moved among those where either side is "
    "above the threshold (all heatmaps in brackets)."
)
AGREEMENT_HEADER = [
    "clip",
    "heatmaps",
    "logit max",
    "logit rel",
    "prob max",
    "prob rel",
    "peak moved (ball/all)",
    "flips",
    "both vis",
    "pos p50",
    "pos p95",
    "pos p99",
    "pos max",
    "angle p99°",
    "len p99",
    "track flips",
    "track differ",
]


def to_markdown(report: VerifyReport) -> str:
    r = report.to_json()
    verdict = "PASS" if report.passed else "FAIL" if report.complete else "INCOMPLETE"
    lines = [
        f"# Verification: {r['candidate']} against {r['reference']}: **{verdict}**",
        "",
        r["verdict"],
        "",
    ]
    s = r["settings"]
    lines += ["## Settings", ""] + _table(["setting", "value"], [[k, v] for k, v in s.items()])
    lines += ["## Checks", ""] + _table(
        ["check", "value", "limit", "passed"],
        [[c["name"], c["value"], c["limit"], c["passed"]] for c in r["checks"]],
    )
    lines += ["## Agreement", "", AGREEMENT_NOTE, ""]
    rows = [_agreement_rows(c["name"], c) for c in r["clips"]]
    if len(rows) != 1:
        rows.append(_agreement_rows("**all**", r["overall"]))
    lines += _table(AGREEMENT_HEADER, rows)
    lines += _sources(r["clips"], r["overall"]["seconds"])
    lines += _ground_truth(r)
    lines += _worst(r["worst"], report.images)
    lines += _track_differences(r["overall"]["track"])
    if r["notes"] or r["error"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in r["notes"]]
        lines += [f"- error: {r['error']}"] if r["error"] else []
        lines.append("")
    return "\n".join(lines)


def _sources(clips: list[dict[str, Any]], seconds: dict[str, float]) -> list[str]:
    rows = [
        [
            c["name"],
            f"{c['width']}x{c['height']}",
            c["fps"],
            c["frames"],
            c["duplicates"],
            c["corrupt"],
            c["windows"],
            c["seconds"]["reference"],
            c["seconds"]["candidate"],
        ]
        for c in clips
    ]
    return (
        ["## Clips", ""]
        + _table(
            [
                "clip",
                "size",
                "fps",
                "frames",
                "duplicates",
                "corrupt",
                "windows",
                "reference s",
                "candidate s",
            ],
            rows,
        )
        + [
            (
                f"Network time in total: reference {seconds['reference']:.2f} s, candidate "
                f"{seconds['candidate']:.2f} s (batch padded to full size, includes the transfers; "
                "first calls include compiling)."
            ),
            "",
        ]
    )


def _ground_truth(r: dict[str, Any]) -> list[str]:
    gt = r["ground_truth"]
    if gt is None:
        return []
    rows = []
    for c in r["clips"]:
        a = c["ground_truth_accuracy"]
        if a is not None:
            rows += [[c["name"], side, *_acc(a[side])] for side in ("reference", "candidate")]
    if len(gt["clips"]) > 1:
        rows += [["**all**", side, *_acc(gt[side])] for side in ("reference", "candidate")]
    return [
        "## Accuracy against ground truth",
        "",
        (
            "Each side's own tracked output scored by `ttball.evaluate` (4 px radius), so "
            "drift from the truth shows beside drift from the reference."
        ),
        "",
    ] + _table(["clip", "side", "F1", "precision", "recall", "err p50 px", "err p95 px"], rows)


def _acc(a: dict[str, Any] | None) -> list[Any]:
    if a is None:
        return ["-"] * 5
    return [
        a["f1"],
        a["precision"],
        a["recall"],
        a["position_error_median"],
        a["position_error_p95"],
    ]


def _side(d: dict[str, Any] | None) -> str:
    if d is None:
        return "not visible"
    return f"({d['x']:.2f}, {d['y']:.2f}) score {d['score']:.4g}"


def _worst(worst: list[dict[str, Any]], images: list[str]) -> list[str]:
    if not worst:
        return []
    pictures = {p.split("/")[-1] for p in images}
    rows = []
    for w in worst:
        name = f"{w['clip']}_f{w['frame']:06d}_w{w['window']:05d}_p{w['position']}.png"
        pic = f"[png](images/{name})" if name in pictures else ""
        rows.append(
            [
                w["clip"],
                w["frame"],
                w["window"],
                w["kind"],
                w["distance_px"],
                _side(w["reference"]),
                _side(w["candidate"]),
                pic,
            ]
        )
    return [
        "## Worst frames",
        "",
        "Every visibility flip, then the largest position differences.",
        "",
    ] + _table(
        ["clip", "frame", "window", "kind", "distance px", "reference", "candidate", "image"], rows
    )


def _track_differences(track: dict[str, Any]) -> list[str]:
    if not track["differing"]:
        return []
    listed = ", ".join(f"{d['clip']}:{d['frame']}" for d in track["differing_frames"])
    return [
        "## Track differences",
        "",
        (
            f"{track['differing']} frame(s) differ after the tracker (visibility, or "
            f"position beyond the listing threshold): {listed}"
        ),
        "",
    ]


def summary_markdown(rows: list[dict[str, Any]]) -> str:
    """One row per candidate of a multi-candidate run."""
    header = [
        "candidate",
        "status",
        "flips",
        "track flips",
        "p99 px",
        "max px",
        "peak moved",
        "logit rel",
        "reason",
    ]
    body = [
        [
            r["candidate"],
            r["status"],
            r.get("flips"),
            r.get("track_flips"),
            r.get("p99_px"),
            r.get("max_px"),
            r.get("peak_moved_with_ball"),
            r.get("logit_rel"),
            r["reason"],
        ]
        for r in rows
    ]
    return "\n".join(["# Verification summary", ""] + _table(header, body))
