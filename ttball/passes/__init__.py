"""Graph passes over the one :class:`~ttball.model.BlurBall` definition (each returns a new model)."""

from ttball.passes.fold_bn import fold_batchnorm

__all__ = ["fold_batchnorm"]
