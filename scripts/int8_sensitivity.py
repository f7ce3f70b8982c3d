"""Which layers' INT8 quantisation moves the ball, and does a mixed INT8 file pass the gate?

Research script (not part of the package). Everything it writes goes to ``--work`` (default
/tmp/int8). Subcommands, run in order:

    python scripts/int8_sensitivity.py prepare      # FP32 export, ORT pre-processing, windows,
                                                    # calibration ranges (synthetic and rally)
    python scripts/int8_sensitivity.py nodes        # the graph's nodes and the groups used
    python scripts/int8_sensitivity.py sweep        # per-group: all-but-group and only-group
    python scripts/int8_sensitivity.py gate NAME=GROUP[+GROUP...] ...   # mixed files through
                                                    # the real verify gate (ORT and OpenVINO)
    python scripts/int8_sensitivity.py gate NAME=only:GROUP[+GROUP...]  # only these quantised
    python scripts/int8_sensitivity.py pairs FILE.onnx [--clips bundled]  # disagreeing frames
    python scripts/int8_sensitivity.py weights-only  # s8-rounded weights, FP32 activations
    python scripts/int8_sensitivity.py time FILE.onnx ... # ms per window, OpenVINO and ORT, batch 1

Results are appended to WORK/results.jsonl; the files to WORK/variants/NAME.CALIB.onnx.

The mixed files are made exactly as :func:`ttball.export.quantize.quantize_int8` makes the
shipped INT8 file (same pre-processing, QDQ, u8/s8 per-channel, MinMax, same calibration
windows, head conv excluded), only with more nodes in ``nodes_to_exclude``. The calibration
ranges are computed once (ORT's ``calibration_cache_path``) and reused for every variant, so
the variants differ only in which nodes are quantised.

The gate is :func:`ttball.verify.verify_many` itself, with eager FP32 as the reference (its
logits cached on disk by input bytes, so it runs once) and a small backend that runs a given
.onnx file in ONNX Runtime (the ``onnxrt-int8`` session settings) or OpenVINO (the
``openvino-int8`` compile properties).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
RALLY = ROOT.parent / "shared" / "data" / "real_rally_a.mp4"
H, W = 288, 512


# ---------------------------------------------------------------------------- preparation


def cmd_prepare(work: Path) -> None:
    import onnx
    from onnxruntime.quantization import quant_pre_process

    from ttball.export.cache import cached_onnx
    from ttball.export.quantize import calibration_windows, synthetic_windows
    from ttball.model import load_model

    work.mkdir(parents=True, exist_ok=True)
    model = load_model()
    # the very file the onnxrt-*/openvino-* backends use (dynamic batch, dynamo exporter)
    fp32 = cached_onnx(model, height=H, width=W, precision="fp32", cache_dir=work / "cache")
    shutil.copy(fp32, work / "fp32.onnx")
    quant_pre_process(str(work / "fp32.onnx"), str(work / "pre.onnx"), skip_symbolic_shape=True)
    print("nodes:", len(onnx.load(str(work / "pre.onnx")).graph.node))
    syn = synthetic_windows(model.config, H, W)
    np.save(work / "win_synthetic.npy", np.concatenate(syn))
    rally = calibration_windows([RALLY], model.config, H, W)
    np.save(work / "win_rally.npy", np.concatenate(rally))
    print("windows: synthetic", len(syn), "rally", len(rally))
    for name in ("synthetic", "rally"):
        calibrate(work, name)


def windows(work: Path, name: str) -> list[np.ndarray]:
    arr = np.load(work / f"win_{name}.npy")
    return [arr[i : i + 1] for i in range(len(arr))]


def calibrate(work: Path, name: str) -> Path:
    """The ranges of every activation on calibration set ``name`` (cached as JSON)."""
    cache = work / f"calib_{name}.json"
    if not cache.exists():
        t = time.perf_counter()
        quantize(work, [], work / f"_full_{name}.onnx", name)
        print(f"calibrated on {name} in {time.perf_counter() - t:.0f} s")
    return cache


def head_nodes(work: Path) -> list[str]:
    from ttball.export.quantize import _head_nodes

    return _head_nodes(work / "pre.onnx")


def quantize(work: Path, exclude: list[str], out: Path, calib: str = "synthetic") -> Path:
    """``pre.onnx`` to INT8 QDQ at ``out`` with the settings of ttball.export.quantize, the
    head conv and ``exclude`` left FP32."""
    import contextlib
    import io

    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from ttball.export.quantize import PERCENTILE, _Windows

    nodes = sorted(set(head_nodes(work)) | set(exclude))
    with contextlib.redirect_stdout(io.StringIO()):
        quantize_static(
            str(work / "pre.onnx"), str(out), _Windows(windows(work, calib)),
            quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=False,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            op_types_to_quantize=None, nodes_to_exclude=nodes,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={"CalibStridedMinMax": 1, "CalibPercentile": PERCENTILE},
            calibration_cache_path=str(work / f"calib_{calib}.json"),
        )
    return out


# ---------------------------------------------------------------------------- groups


def graph_nodes(work: Path) -> list[Any]:
    import onnx

    return list(onnx.load(str(work / "pre.onnx")).graph.node)


def module_path(node: Any) -> str:
    """The deepest torch module the dynamo exporter recorded for the node (its
    ``pkg.torch.onnx.name_scopes`` metadata, e.g. ``model.stage4.0.fuse_layers.0.1.1``)."""
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            scopes = json.loads(p.value.replace("'", '"'))
            return scopes[-2] if len(scopes) > 1 else ""
    return ""


# Groups: a regex on the module path (``re.match``), or ``op:TYPE`` for every node of a type.
# The graph's fx-level Adds/ReLUs of an HR module's fusion sit on ``model.stageN.0`` and
# ``model.stageN.0.relu`` (no deeper module), so "fuse" takes those too.
GROUPS: dict[str, str] = {
    "stem": r"model\.(bn1|bn2|relu)$",
    "layer1": r"model\.layer1\.",
    "transition1": r"model\.transition1\.",
    "s2.branches": r"model\.stage2\.0\.branches\.",
    "s2.fuse": r"model\.stage2\.0(\.relu|\.fuse_layers\..*)?$",
    "transition2": r"model\.transition2\.",
    "s3.b0": r"model\.stage3\.0\.branches\.0\.",
    "s3.b1": r"model\.stage3\.0\.branches\.1\.",
    "s3.b2": r"model\.stage3\.0\.branches\.2\.",
    "s3.fuse": r"model\.stage3\.0(\.relu|\.fuse_layers\..*)?$",
    "transition3": r"model\.transition3\.",
    "s2.b1": r"model\.stage2\.0\.branches\.1\.",
    "s4.b0": r"model\.stage4\.0\.branches\.0\.",
    "s4.b0.1": r"model\.stage4\.0\.branches\.0\.1",
    "s4.b1": r"model\.stage4\.0\.branches\.1\.",
    "s4.b2": r"model\.stage4\.0\.branches\.2\.",
    "s4.b3": r"model\.stage4\.0\.branches\.3\.",
    "s4.fuse": r"model\.stage4\.0(\.relu|\.fuse_layers\..*)?$",
    "s4.fuse.adds": r"model\.stage4\.0(\.relu)?$",
    "se": r".*\.se(\.|$)",
    "op:Resize": "op:Resize",
    "op:Add": "op:Add",
    "op:Mul": "op:Mul",
    "op:Gemm": "op:Gemm",
    "op:Conv": "op:Conv",
}


def group_nodes(nodes: list[Any], spec: str) -> list[str]:
    """Node names of ``spec``: group names (or raw regexes / ``op:TYPE`` / ``name:NODE``)
    joined by ``+``."""
    names: list[str] = []
    for part in spec.split("+"):
        pat = GROUPS.get(part, part)
        if pat.startswith("op:"):
            hit = [n.name for n in nodes if n.op_type == pat[3:]]
        elif pat.startswith("name:"):
            hit = [n.name for n in nodes if n.name == pat[5:]]
        else:
            hit = [n.name for n in nodes if re.match(pat, module_path(n))]
        if not hit:
            raise SystemExit(f"group {part!r} matches no node")
        names += [h for h in hit if h not in names]
    return names


def cmd_nodes(work: Path) -> None:
    nodes = graph_nodes(work)
    for n in nodes:
        print(f"{n.op_type:11s} {n.name:28s} {module_path(n)}")
    for g in GROUPS:
        print(f"group {g:14s} {len(group_nodes(nodes, g)):3d} nodes")


# ---------------------------------------------------------------------------- the gate


class CachedReference:
    """Eager FP32 (the verify reference), its logits kept on disk by the input's bytes."""

    name = "eager-fp32"

    def __init__(self, work: Path) -> None:
        from ttball.backends import create
        from ttball.model import load_model

        self.model = load_model()
        self.inner = create("eager-fp32", self.model, torch.device("cpu"))
        self.device = torch.device("cpu")
        self.folder = work / "refcache"
        self.folder.mkdir(exist_ok=True)

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        x = batch.detach().cpu().float().contiguous().numpy()
        key = hashlib.sha1(x.tobytes()).hexdigest()[:20]
        path = self.folder / f"{key}.npy"
        if path.exists():
            return torch.from_numpy(np.load(path))
        out = self.inner(batch).float()
        np.save(path, out.numpy())
        return out


class FileBackend:
    """Runs one .onnx file: ``ort`` with the onnxrt-int8 session settings, or ``ov`` with the
    openvino-int8 compile properties (f32 inference precision, LATENCY)."""

    def __init__(self, path: Path, runtime: str) -> None:
        self.name = f"{path.stem}@{runtime}"
        self.device = torch.device("cpu")
        self.runtime = runtime
        self.path = path
        self.requests: dict[tuple[int, ...], Any] = {}
        if runtime == "ort":
            import onnxruntime as ort

            from ttball.backends.onnxrt import TUNED_CONFIG, SessionSettings

            so = SessionSettings(config=TUNED_CONFIG).session_options()
            self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        else:
            import openvino as ov

            self.core = ov.Core()

    def run_np(self, x: np.ndarray) -> np.ndarray:
        from ttball.export.onnx import INPUT_NAME, OUTPUT_NAME

        if self.runtime == "ort":
            return np.asarray(self.session.run([OUTPUT_NAME], {INPUT_NAME: x})[0], np.float32)
        shape = tuple(x.shape)
        if shape not in self.requests:
            net = self.core.read_model(str(self.path))
            net.reshape({INPUT_NAME: list(shape)})
            compiled = self.core.compile_model(
                net, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"})
            self.requests[shape] = compiled.create_infer_request()
        req = self.requests[shape]
        req.infer({INPUT_NAME: x})
        return np.array(req.get_tensor(OUTPUT_NAME).data, dtype=np.float32, copy=True)

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        x = batch.detach().cpu().float().contiguous().numpy()
        return torch.from_numpy(self.run_np(x))


def clip_sets() -> dict[str, list[Path]]:
    from ttball.verify import bundled_reference_clips

    return {"bundled": list(bundled_reference_clips()), "rally": [RALLY]}


def gate(reference: CachedReference, backends: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{candidate: {clipset_flips, clipset_p99, clipset_max, ...}}`` from verify_many."""
    from ttball.verify import VerifyOptions, summary_row, verify_many

    rows: dict[str, dict[str, Any]] = {name: {} for name in backends}
    for label, clips in clip_sets().items():
        reports = verify_many(backends, reference, clips, config=reference.model.config,
                              options=VerifyOptions(max_frames=150))
        for name, rep in reports.items():
            r = summary_row(rep)
            rows[name].update({
                f"{label}_pass": r["passed"], f"{label}_flips": r["flips"],
                f"{label}_p99": r["p99_px"], f"{label}_max": r["max_px"],
                f"{label}_moved": r["peak_moved_with_ball"], f"{label}_logit_rel": r["logit_rel"],
                f"{label}_n": r["compared"], f"{label}_track_flips": r["track_flips"],
            })
    for row in rows.values():
        row["pass"] = bool(row["bundled_pass"] and row["rally_pass"])
    return rows


def fmt(name: str, row: dict[str, Any]) -> str:
    def px(v: Any) -> str:
        return "-" if v is None else f"{v:.3g}"

    return (f"{name:38s} bundled f={row['bundled_flips']} p99={px(row['bundled_p99'])} "
            f"max={px(row['bundled_max'])} | rally f={row['rally_flips']} "
            f"p99={px(row['rally_p99'])} max={px(row['rally_max'])} "
            f"lrel={px(row['rally_logit_rel'])} | {'PASS' if row['pass'] else 'fail'}")


def variant(work: Path, name: str, exclude: list[str], calib: str) -> Path:
    out = work / "variants" / f"{name}.{calib}.onnx"
    out.parent.mkdir(exist_ok=True)
    if not out.exists():
        quantize(work, exclude, out, calib)
    return out


def record(work: Path, name: str, row: dict[str, Any]) -> None:
    with open(work / "results.jsonl", "a") as f:
        f.write(json.dumps({"name": name, **row}, default=str) + "\n")


def cmd_sweep(work: Path, args: argparse.Namespace) -> None:
    """Per group: quantise all but the group ("-g") and only the group ("+g")."""
    nodes = graph_nodes(work)
    every = [n.name for n in nodes]
    reference = CachedReference(work)
    groups = args.groups or list(GROUPS)
    todo: list[tuple[str, list[str]]] = [("full", [])] if not args.groups else []
    for g in groups:
        members = group_nodes(nodes, g)
        if "minus" in args.mode:
            todo.append((f"minus[{g}]", members))
        if "only" in args.mode:
            todo.append((f"only[{g}]", [n for n in every if n not in members]))
    for name, exclude in todo:
        path = variant(work, name, exclude, args.calib)
        rows = gate(reference, {name: FileBackend(path, args.runtime)})
        row = {**rows[name], "calib": args.calib, "runtime": args.runtime,
               "excluded": len(exclude)}
        record(work, name, row)
        print(fmt(f"{name} ({len(exclude)})", row), flush=True)


def cmd_gate(work: Path, args: argparse.Namespace) -> None:
    """Named exclusion sets NAME=SPEC through the gate on both runtimes."""
    nodes = graph_nodes(work)
    reference = CachedReference(work)
    for item in args.sets:
        name, _, spec = item.partition("=")
        if spec.startswith("only:"):  # quantise only these groups: exclude the rest
            keep = set(group_nodes(nodes, spec[5:]))
            exclude = [n.name for n in nodes if n.name not in keep]
        else:
            exclude = group_nodes(nodes, spec) if spec else []
        for calib in args.calibs:
            path = variant(work, name, exclude, calib)
            for rt in args.runtimes:
                rows = gate(reference, {name: FileBackend(path, rt)})
                row = {**rows[name], "calib": calib, "runtime": rt, "excluded": len(exclude),
                       "spec": spec}
                record(work, f"gate:{name}", row)
                print(fmt(f"{name}/{calib}/{rt} ({len(exclude)})", row), flush=True)


def cmd_time(work: Path, args: argparse.Namespace) -> None:
    """Median ms per (1, 9, 288, 512) window, every file and runtime in one process."""
    x = windows(work, "synthetic")[0]
    paths = [Path(p) for p in args.files]
    for rt in args.runtimes:
        for path in paths:
            b = FileBackend(path, rt)
            for _ in range(3):
                b.run_np(x)
            ms = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                b.run_np(x)
                ms.append(1000 * (time.perf_counter() - t))
            print(f"{rt:4s} {path.name:40s} median {statistics.median(ms):7.1f} ms "
                  f"(min {min(ms):.1f}, max {max(ms):.1f}, n={len(ms)})", flush=True)


def cmd_pairs(work: Path, args: argparse.Namespace) -> None:
    """The heatmaps where a file disagrees with FP32 on the rally (or bundled clips): each
    side's candidates (score, x, y), to see whether a near tie decides the best one."""
    from ttball.postprocess import FrameGeometry, detect
    from ttball.verify import VerifyOptions, verify_many

    reference = CachedReference(work)
    cand = FileBackend(Path(args.file), args.runtime)
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    class Rec:
        name, device = "rec", torch.device("cpu")

        def __call__(self, batch: torch.Tensor) -> torch.Tensor:
            out = cand(batch)
            seen.append((reference(batch).numpy(), out.numpy()))
            return out

    clips = clip_sets()[args.clips]
    rep = verify_many({"c": Rec()}, reference, clips, config=reference.model.config,
                      options=VerifyOptions(max_frames=150))["c"]
    offset = 0
    for res in rep.results:
        geom = FrameGeometry(res.source["width"], res.source["height"], W, H)
        for pr in res.pairs:
            d = pr.distance
            if not (pr.flip or (d is not None and d > args.px)):
                continue
            ref_l, cand_l = seen[offset + pr.window]
            sig = lambda a: 1 / (1 + np.exp(-a))
            rc = detect(sig(ref_l[0, pr.position]), geom)
            cc = detect(sig(cand_l[0, pr.position]), geom)
            show = lambda ds: " ".join(f"{c.score:.1f}@({c.x:.0f},{c.y:.0f})" for c in ds[:4])
            print(f"{res.clip.name} frame {pr.frame}: d={d if d is None else round(d, 2)} "
                  f"peak ref {ref_l[0, pr.position].max():.2f} cand {cand_l[0, pr.position].max():.2f}"
                  f"\n   ref  {show(rc)}\n   cand {show(cc)}")
        offset += res.source["windows"]


def cmd_weights_only(work: Path, args: argparse.Namespace) -> None:
    """FP32 file whose Conv/Gemm weights are rounded as the INT8 file stores them (symmetric
    s8, per output channel for Conv, per tensor for Gemm; activations FP32), then the gate:
    the weights' share of the error on its own."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(work / "pre.onnx"))
    inits = {i.name: i for i in model.graph.initializer}
    ops = set(args.ops)
    for n in model.graph.node:
        if n.op_type not in ops or n.output[0] == "heatmaps" or len(n.input) < 2:
            continue
        init = inits.get(n.input[1])
        if init is None:
            continue
        w = numpy_helper.to_array(init).astype(np.float32)
        axis = tuple(range(1, w.ndim)) if n.op_type == "Conv" else None
        scale = np.abs(w).max(axis=axis, keepdims=True) / 127.0
        scale = np.where(scale == 0, 1.0, scale)
        q = np.clip(np.round(w / scale), -127, 127) * scale
        init.CopyFrom(numpy_helper.from_array(q.astype(np.float32), init.name))
    out = work / "variants" / f"weights_only_{'_'.join(sorted(ops))}.onnx"
    out.parent.mkdir(exist_ok=True)
    onnx.save(model, str(out))
    name = out.stem
    rows = gate(CachedReference(work), {name: FileBackend(out, "ort")})
    record(work, name, rows[name])
    print(fmt(name, rows[name]), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("/tmp/int8"))
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare")
    sub.add_parser("nodes")
    sw = sub.add_parser("sweep")
    sw.add_argument("groups", nargs="*", help="group names (default: all, plus the full file)")
    sw.add_argument("--mode", default="minus,only")
    sw.add_argument("--calib", default="synthetic", choices=["synthetic", "rally"])
    sw.add_argument("--runtime", default="ort", choices=["ort", "ov"])
    ga = sub.add_parser("gate")
    ga.add_argument("sets", nargs="+", help="NAME=GROUP[+GROUP...] (excluded; NAME= for the "
                    "full INT8) or NAME=only:GROUP[+GROUP...] (only these quantised)")
    ga.add_argument("--calibs", nargs="+", default=["synthetic"])
    ga.add_argument("--runtimes", nargs="+", default=["ort", "ov"])
    pa = sub.add_parser("pairs")
    pa.add_argument("file")
    pa.add_argument("--runtime", default="ort", choices=["ort", "ov"])
    pa.add_argument("--clips", default="rally", choices=["rally", "bundled"])
    pa.add_argument("--px", type=float, default=0.5)
    wo = sub.add_parser("weights-only")
    wo.add_argument("--ops", nargs="+", default=["Conv", "Gemm"])
    ti = sub.add_parser("time")
    ti.add_argument("files", nargs="+")
    ti.add_argument("--runtimes", nargs="+", default=["ov", "ort"])
    ti.add_argument("--repeat", type=int, default=15)
    args = p.parse_args()
    torch.set_num_threads(2)
    if args.cmd in ("prepare", "nodes"):
        {"prepare": cmd_prepare, "nodes": cmd_nodes}[args.cmd](args.work)
    else:
        {"sweep": cmd_sweep, "gate": cmd_gate, "time": cmd_time, "pairs": cmd_pairs,
         "weights-only": cmd_weights_only}[args.cmd](args.work, args)


if __name__ == "__main__":
    main()
