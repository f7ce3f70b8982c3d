"""scripts/critical_path.py's what-if of folded block tails, on hand-made step times."""

from __future__ import annotations

from script_env import load_script

critical_path = load_script("critical_path")


def test_every_tail_but_the_heads_costs_the_extra() -> None:
    us = {0: 20.0, 1: 4.5, 2: 10.0, 3: 6.0, 4: 8.0}
    names = {0: "conv 9k3s1u0->64", 1: "tail C16", 2: "conv 16k3s1u0->16",
             3: "tail C32 +1 terms", 4: "tail C16 +3 terms head"}
    folded = critical_path.fold_tails(us, names, 1.0)
    assert folded == {0: 20.0, 1: 1.0, 2: 10.0, 3: 1.0, 4: 8.0}  # the head's tail stays
    assert us[1] == 4.5  # the measured times are left alone
