"""The ``ttball`` command line. Each subcommand lives in its own module of this package with
``add_arguments(parser)`` and ``run(args) -> int``; this module only dispatches.

Errors a user can act on are raised as :class:`ttball.errors.UserError` and printed as one line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import NoReturn

from ttball.errors import UserError

# name -> (module, one-line help). Modules are imported when the parser is built; they must
# keep heavy imports (torch, cv2) inside their run() so that `ttball --help` stays fast.
COMMANDS: dict[str, tuple[str, str]] = {
    "track": ("ttball.cli.track", "track the ball in a video or a folder of images"),
    "synth": ("ttball.cli.synth", "render synthetic rally clips with exact ground truth"),
    "train": ("ttball.cli.train", "train or fine-tune BlurBall on synthetic and labelled clips"),
    "eval": ("ttball.cli.eval", "score predicted tracks against ground truth"),
    "bench": ("ttball.cli.bench", "measure every backend the same way (the seed's table)"),
    "fusion": ("ttball.cli.fusion", "rerun the seed's section-2 fusion experiments"),
    "verify": ("ttball.cli.verify", "prove an optimized backend finds the same ball as the reference"),
    "export": ("ttball.cli.export", "export the model: ONNX (FP32/FP16/INT8), .ort for phones, or a Triton model repository"),
    "serve": ("ttball.cli.serve", "the real-time ball worker: sessions, batching, KServe v2, metrics"),
    "loadtest": ("ttball.cli.loadtest", "replay clips as concurrent sessions against a running worker"),
    "cache": ("ttball.cli.cache", "list or clear what ttball built, tuned and chose on this machine"),
}


# Folders prepare_out_dir created in this run, outermost new one first: a run that then fails
# with a one-line error removes those it left empty (main), so bad input leaves nothing behind.
_CREATED: list[Path] = []


def prepare_out_dir(path: str | os.PathLike[str]) -> Path:
    """Create an output folder (and parents) and check it is writable; one-line errors."""
    out = Path(path)
    new = [d for d in (out, *out.parents) if not d.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        _CREATED.extend(reversed(new))
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create output folder: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK):
        raise UserError(f"--out {out}: output folder is not writable")
    return out


def check_threshold_flag(value: float | None) -> None:
    """``--threshold``, when given, by the library's rule (strictly between 0 and 1)."""
    if value is None:
        return
    from ttball.postprocess import check_threshold

    try:
        check_threshold(value, "--threshold")
    except ValueError as exc:
        raise UserError(str(exc)) from None


def check_targets(*files: Path) -> None:
    """Files a run will write, checked before its work (not found after it): none a folder."""
    for file in files:
        if file.is_dir():
            raise UserError(f"{file} is a folder; cannot write the run's file there")


def prepare_out_file(path: str | os.PathLike[str]) -> Path:
    """An output file's folder created and checked (:func:`prepare_out_dir`), and the file
    itself not a folder: before the work, so bad paths fail in one line and lose nothing."""
    out = Path(path)
    prepare_out_dir(out.parent)
    check_targets(out)
    return out


class Parser(argparse.ArgumentParser):
    """argparse's parser with a one-line error: its own printed the whole usage (9-27 lines)
    before the error. Subcommands' parsers are of this class too (add_subparsers takes the
    parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ttball", description="Fast, verified BlurBall inference.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(module)
        mod.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, sys.argv[1:] if argv is None else argv)
    if args.version:
        from ttball import __version__

        print(__version__)
        return 0
    if not args.command:
        parser.print_help()
        return 2
    _CREATED.clear()
    # FFmpeg's own log lines inside OpenCV ("moov atom not found", "corrupt decoded frame")
    # would precede our one-line errors and warnings about the same video; a user's setting wins
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET
    # and the PyTorch profiler's (Kineto's) "USDT: ... profiler_start" lines, two a profiled
    # call on torch 2.13, in the middle of `bench`'s progress bar; 6 is above every level it
    # prints (errors included, which its default already hides); read when a profiler starts
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except UserError as exc:
        _remove_empty_created()
        print(f"ttball {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (MemoryError, RuntimeError) as exc:
        if not _out_of_memory(exc):
            raise
        _remove_empty_created()
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        # the CPU allocator's message without its "[enforce fail at alloc_cpu.cpp:127]" prefix
        detail = detail[max(0, detail.find("DefaultCPUAllocator")):]
        print(f"ttball {args.command}: error: out of memory ({detail}); ask for less: a "
              "smaller batch, input size or fewer sessions", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _remove_empty_created()
        print(f"ttball {args.command}: interrupted", file=sys.stderr)
        return 130


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed; a command's positionals may come after its options as well as before
    (``cache clear --dir X tuning``, ``verify a.mp4 --backend B b.mp4``): argparse takes a
    command's positionals in one run, so the rest were "unrecognized"; the command's own parser
    then parses them intermixed (and names any that is truly unknown)."""
    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    if not args.command:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    commands = _subparsers(parser)
    assert commands is not None  # (args.command is set)
    command = commands.choices[args.command]
    nested = _subparsers(command)
    if nested is not None:  # commands of its own (export onnx|triton): argparse can't intermix
        chosen = nested.choices.get(getattr(args, nested.dest, None) or "", command)
        chosen.error(f"unrecognized arguments: {' '.join(extra)}")
    own = command.parse_intermixed_args(argv[argv.index(args.command) + 1:])
    return argparse.Namespace(**{**vars(args), **vars(own)})


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _out_of_memory(exc: BaseException) -> bool:
    """An allocation that failed: Python's ``MemoryError``, PyTorch's ``OutOfMemoryError``
    (CUDA) or its CPU allocator's ``RuntimeError`` ("can't allocate memory")."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return "can't allocate memory" in str(exc) or "CUDA out of memory" in str(exc)


def _remove_empty_created() -> None:
    """The folders this run created and left empty, innermost first."""
    for folder in reversed(_CREATED):
        try:
            folder.rmdir()  # only if empty
        except OSError:
            pass
    _CREATED.clear()


def entry() -> None:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `ttball eval ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)
