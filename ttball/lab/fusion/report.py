"""The results of one run, with the figures, table rows and verdicts computed from them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ttball.lab.fusion.compile_cache import CompileCacheResult
from ttball.lab.fusion.conclusions import verdicts
from ttball.lab.fusion.experiments import (
    SEED_SIZES,
    ChainResult,
    FoldResult,
    FusionSizes,
    OverheadResult,
)
from ttball.lab.fusion.figures import derive, figure_rows, seed_figures, traffic_rows


@dataclass(frozen=True)
class FusionReport:
    machine: dict[str, Any]
    sizes: FusionSizes
    fold: FoldResult
    chain: ChainResult
    overhead: OverheadResult
    compile_cache: CompileCacheResult | None  # None: not measured

    def measured(self) -> dict[str, float | None]:
        """The raw figures, keyed like :data:`SEED`."""
        c, cc = self.chain, self.compile_cache
        return {
            "fold.max_abs_diff": self.fold.max_abs_diff,
            "fold.max_rel_diff": self.fold.max_rel_diff,
            "fold.unfused_ms": self.fold.unfused.median_ms,
            "fold.folded_ms": self.fold.folded.median_ms,
            "fold.bn_ms": self.fold.bn_alone.median_ms,
            "chain.eager_ms": c.eager.median_ms,
            "chain.compiled_ms": c.compiled.median_ms,
            "chain.inplace_ms": c.inplace.median_ms,
            "chain.max_abs_diff": c.compiled_max_abs_diff,
            "chain.inplace_max_abs_diff": c.inplace_max_abs_diff,
            "compile.cold_s": cc.cold_s if cc else None,
            "compile.warm_s": cc.warm_s if cc else None,
            "overhead.one_call_ms": self.overhead.one_call.median_ms,
            "overhead.split_ms": self.overhead.split.median_ms,
            "traffic.fresh_array_ms": c.fresh_array_ms,
        }

    def figures(self) -> dict[str, float | None]:
        return derive(self.measured(), self.sizes, self.chain.itemsize)

    def rows(self) -> list[dict[str, Any]]:
        return figure_rows(self.figures(), seed_figures())

    def verdicts(self) -> list[str]:
        return verdicts(self.figures(), self.sizes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "sizes": asdict(self.sizes),
            "seed_sizes": self.sizes == SEED_SIZES,
            "experiments": {
                "fold": asdict(self.fold),
                "chain": {**asdict(self.chain), "fresh_array_ms": self.chain.fresh_array_ms},
                "compile_cache": asdict(self.compile_cache) if self.compile_cache else None,
                "overhead": {**asdict(self.overhead), "per_call_us": self.overhead.per_call_us},
                "traffic": traffic_rows(self.figures()),
            },
            "figures": self.rows(),
            "verdicts": self.verdicts(),
        }
