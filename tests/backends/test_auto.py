"""--backend auto: verified candidates only, the fastest wins, the choice is cached."""

import json

import pytest
import torch

from ttball.backends import auto, base
from ttball.backends.eager import EagerBackend
from ttball.cli import main


class _Shifted(EagerBackend):
    """Eager FP32 with its heatmaps moved 6 px: fast to build, and must fail verification."""

    def run(self, batch: torch.Tensor) -> torch.Tensor:
        return torch.roll(super().run(batch), shifts=6, dims=-1)


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("TTBALL_CACHE_DIR", str(tmp_path / "cache"))
    entry = base.BackendSpec("test-shifted", lambda m, d: _Shifted(m, d), "shifted", base._always)
    monkeypatch.setitem(base._REGISTRY, "test-shifted", entry)
    return tmp_path / "cache" / "auto-backend.json"


@pytest.fixture(scope="module")
def trained_small():
    from ttball.model import load_model

    model = load_model()  # the shipped weights find the ball even at 72x128
    model.config = model.config.evolve(input_height=72, input_width=128)
    return model


def test_failing_candidate_is_never_chosen_and_choice_is_cached(isolated, trained_small,
                                                                monkeypatch) -> None:
    names = ("test-shifted", "folded-fp32", "eager-fp32")
    choice = auto.choose_backend(trained_small, "cpu", candidates=names)
    status = {t.name: t.status for t in choice.trials}
    assert status["test-shifted"] == "failed"
    assert choice.backend in {"folded-fp32", "eager-fp32"}
    assert status[choice.backend] == "chosen"
    saved = json.loads(isolated.read_text())
    assert [v["backend"] for v in saved.values()] == [choice.backend]

    def no_trial(*args, **kwargs):
        raise AssertionError("a cached choice ran a trial")

    monkeypatch.setattr(auto, "_try", no_trial)
    again = auto.choose_backend(trained_small, "cpu", candidates=tuple(reversed(names)))
    assert again.cached and again.backend == choice.backend  # read back, nothing re-run


def test_a_choice_among_other_candidates_is_made_again(isolated, trained_small) -> None:
    """A cached choice stands only for the candidates it was chosen among: a release that drops
    the chosen backend from the list (openvino-bf16, forty-fifth session: it failed verify) or
    changes the list chooses again instead of running the old choice forever."""
    first = auto.choose_backend(trained_small, "cpu", candidates=("folded-fp32", "eager-fp32"))
    assert not first.cached
    # the chosen backend no longer a candidate
    dropped = auto.choose_backend(trained_small, "cpu", candidates=("test-shifted", "eager-fp32"))
    assert not dropped.cached and dropped.backend == "eager-fp32"
    assert {t.name for t in dropped.trials} == {"test-shifted", "eager-fp32"}
    # the chosen backend still one, but a candidate added
    added = auto.choose_backend(trained_small, "cpu",
                                candidates=("test-shifted", "eager-fp32", "folded-fp32"))
    assert not added.cached and "folded-fp32" in {t.name for t in added.trials}
    # the same candidates: cached
    assert auto.choose_backend(trained_small, "cpu",
                               candidates=("folded-fp32", "eager-fp32", "test-shifted")).cached


def test_unavailable_candidates_are_skipped_with_their_reason(isolated, trained_small) -> None:
    choice = auto.choose_backend(trained_small, "cpu", candidates=("cudagraph-fp16", "eager-fp32"))
    [skipped] = [t for t in choice.trials if t.name == "cudagraph-fp16"]
    assert skipped.status == "unavailable" and "CUDA" in skipped.reason
    assert choice.backend == "eager-fp32"


def test_the_trials_of_disk_cache_backends_get_the_cache_folder(isolated, trained_small,
                                                                tmp_path, cache_backends) -> None:
    """``serve --compile-cache DIR --backend auto``: a trial of a backend tagged ``disk-cache``
    compiles and tunes into DIR (its tuning records there for the backend then served), the
    others get no such option."""
    auto.choose_backend(trained_small, "cpu", candidates=("test-cached", "test-plain"),
                        cache_dir=tmp_path / "compiled")
    assert cache_backends == {"test-cached": {"cache_dir": str(tmp_path / "compiled")},
                              "test-plain": {}}
    assert base.cache_options("test-cached", None) == {}


def test_track_cli_uses_the_choice(isolated, trained_small, tmp_path, clip, monkeypatch) -> None:
    from ttball.model import save_checkpoint

    weights = tmp_path / "w.safetensors"
    save_checkpoint(weights, trained_small, trained_small.config)
    monkeypatch.setitem(auto.CANDIDATES, "cpu", ("folded-fp32", "eager-fp32"))
    out = tmp_path / "out"
    assert main(["track", str(clip), "--weights", str(weights), "--device", "cpu",
                 "--out", str(out), "--quiet"]) == 0
    meta = json.loads((out / "track.json").read_text())
    assert meta["settings"]["backend"] in {"folded-fp32", "eager-fp32"}
    assert isolated.exists()


def test_every_candidate_is_a_registered_backend() -> None:
    names = set(base.names())
    for device, candidates in auto.CANDIDATES.items():
        assert set(candidates) <= names, f"{device}: {set(candidates) - names}"
        assert candidates[-1] == auto.REFERENCE  # the fallback that always passes


class _Counting:
    """A stand-in backend that counts its calls and takes ``seconds`` per call."""

    device = torch.device("cpu")

    def __init__(self, seconds: float) -> None:
        self.seconds, self.calls = seconds, 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.seconds:
            import time

            time.sleep(self.seconds)
        return x


def test_fast_candidates_are_timed_over_more_calls_slow_ones_over_three(monkeypatch) -> None:
    monkeypatch.setattr(auto, "TIMED_S", 0.05)
    fast, slow = _Counting(0.0), _Counting(0.03)
    auto._time_one_window(fast, 8, 8)
    auto._time_one_window(slow, 8, 8)
    assert fast.calls == 1 + auto.TIMED_CALLS[1]  # a warm-up call, then the most
    assert slow.calls == 1 + auto.TIMED_CALLS[0]  # past TIMED_S after the fewest


def test_own_clips_are_what_the_candidates_are_verified_on_and_key_the_choice(
        isolated, trained_small, tmp_path, monkeypatch) -> None:
    """``--auto-clips``: the trials verify on the user's clips (not the bundled ones), and the
    choice is cached apart from the bundled clips' (by the clips' contents)."""
    from conftest import draw_clip

    import ttball.verify

    own = tmp_path / "own.mp4"
    draw_clip(own, frames=12)
    seen = []
    real = ttball.verify.verify_backend

    def spy(backend, reference, clips, **kwargs):
        seen.append([str(c) for c in clips])
        return real(backend, reference, clips, **kwargs)

    monkeypatch.setattr(ttball.verify, "verify_backend", spy)
    mine = auto.choose_backend(trained_small, "cpu", candidates=("folded-fp32", "eager-fp32"),
                               clips=[own])
    assert seen == [[str(own)]] and not mine.cached
    assert auto.choose_backend(trained_small, "cpu", candidates=("folded-fp32", "eager-fp32"),
                               clips=[own]).cached
    bundled = auto.choose_backend(trained_small, "cpu", candidates=("eager-fp32",))
    assert not bundled.cached and len(seen) == 1  # another key: chosen again (no trial to verify)
    assert len(json.loads(isolated.read_text())) == 2
    draw_clip(own, frames=9)  # other contents: chosen again
    assert not auto.choose_backend(trained_small, "cpu", candidates=("eager-fp32",),
                                   clips=[own]).cached
    with pytest.raises(auto.UserError, match="--auto-clips .*no such file"):
        auto.choose_backend(trained_small, "cpu", clips=[tmp_path / "missing.mp4"])


def test_auto_clips_only_with_auto(tmp_path, clip, capsys) -> None:
    assert main(["track", str(clip), "--backend", "eager-fp32", "--auto-clips", str(clip),
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "--auto-clips only applies with --backend auto" in capsys.readouterr().err
    assert main(["track", str(clip), "--auto-clips", str(tmp_path / "nope.mp4"),
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_the_reference_runs_once_per_window_over_all_the_trials(isolated, trained_small,
                                                                monkeypatch) -> None:
    """Every trial verifies on the same windows: the reference (eager FP32, the slowest) is
    run for them once, not once a trial, and gives the same outputs each time."""
    calls = []
    real = EagerBackend.__call__

    def counted(self, batch):
        calls.append(getattr(self, "name", ""))
        return real(self, batch)

    monkeypatch.setattr(EagerBackend, "__call__", counted)
    reference_calls = []
    # eager-fp32 is no candidate here: its own timing loop is bounded by time, so its calls
    # would vary from run to run (51 against 53 on a loaded CI machine) and hide the count
    for candidates in (("folded-fp32",), ("folded-fp32", "folded-fp32-cl")):
        calls.clear()
        auto.choose_backend(trained_small, "cpu", candidates=candidates, reselect=True)
        assert calls.count("folded-fp32") > 1  # (its verification went through __call__)
        reference_calls.append(calls.count("eager-fp32"))
    assert reference_calls[0] == reference_calls[1]  # a second trial ran no reference again
    remembered = auto.Remembered(auto.base.create("eager-fp32", trained_small, "cpu"))
    x = torch.randn(1, 9, 72, 128)
    first = remembered(x)
    first.add_(1.0)  # the caller's copy: the kept output stays as it was
    assert torch.equal(remembered(x), first - 1.0) and remembered.name == "eager-fp32"


@pytest.mark.parametrize("text", ["[1, 2, 3]", '"a string"', "7",
                                  '{"KEY": [1]}', '{"KEY": {"backend": "eager-fp32", "trials": 5}}'])
def test_a_cache_file_of_another_shape_is_no_choice(isolated, trained_small, text) -> None:
    """Valid JSON that is not a mapping of choices (a list, a number; an entry that is no
    object, trials that are no list) was an AttributeError traceback: now the choice is made
    again and the file rewritten."""
    isolated.parent.mkdir(parents=True, exist_ok=True)
    key = auto.machine_key(torch.device("cpu"), trained_small.config.sha256 or "unhashed")
    isolated.write_text(text.replace("KEY", key))
    choice = auto.choose_backend(trained_small, "cpu", candidates=("eager-fp32",))
    assert not choice.cached and choice.backend == "eager-fp32"
    assert [v["backend"] for v in json.loads(isolated.read_text()).values()] == ["eager-fp32"]
