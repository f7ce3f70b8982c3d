"""Small experiments that explain where inference time goes, each reproducing a claim of the
seed articles on this machine and saying whether it holds.

- :mod:`ttball.lab.fusion`: why operator fusion pays (BN folding, an elementwise chain eager vs
  ``torch.compile`` vs in-place, per-call overhead, bytes moved).

Modules import torch themselves; importing this package stays cheap.
"""
