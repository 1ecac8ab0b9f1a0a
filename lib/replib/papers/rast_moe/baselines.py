"""Baselines of the RAST-MoE chapter: the shallow MLP encoder (the prior work's encoder) with the same
actor-critic interface as :class:`method.RastEncoder`. The dense Transformer baseline is
``method.RastEncoder(n_experts=0)``; the heuristic hold/release rules are in ``task``."""

from __future__ import annotations

import torch
from torch import nn

from replib.models.mlp import MLP

__all__ = ["MLPEncoder"]


class MLPEncoder(nn.Module):
    """The flattened state (Z x F zone features and the global features) through a shared
    :class:`replib.models.mlp.MLP` with ``hidden`` layers; outputs Z release logits and Z zone values."""

    def __init__(self, zones: int, zone_features: int, global_features: int, hidden=(128, 128), seed: int = 0):
        super().__init__()
        self.zones = zones
        self.net = MLP([zones * zone_features + global_features, *hidden, 2 * zones], seed=seed)

    def forward(self, zone_feats: torch.Tensor, global_feats: torch.Tensor):
        out = self.net(torch.cat([zone_feats.flatten(1), global_feats], dim=1))
        return out[:, : self.zones], out[:, self.zones:], {}
