"""Per-task baselines, fit on each test task's context rows only (the same rows and missingness
L2M sees in context): a masked MLP predictor and a GDFS-style selector on top of it, both batched
over tasks (one independent network per task, trained together with batched matrix products).

Contents: :class:`TaskNetworks`, :func:`mlp_predict`, :func:`fit_masked_mlp`, :func:`fit_gdfs_selector`,
:func:`mlp_acquisition`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .method import acquisition_state, greedy_acquisition, straight_through_gumbel
from .task import gaussian_nll

__all__ = ["TaskNetworks", "mlp_predict", "fit_masked_mlp", "fit_gdfs_selector", "mlp_acquisition"]


class TaskNetworks(nn.Module):
    """``n_tasks`` independent ReLU MLPs ``sizes[0] -> ... -> sizes[-1]`` with dropout after each
    hidden layer, applied to inputs of shape (tasks, rows, sizes[0]); PyTorch's default Linear
    initialisation, drawn from ``generator`` (a CPU generator; move the networks with ``.to``)."""

    def __init__(self, n_tasks: int, sizes, dropout: float, generator: torch.Generator):
        super().__init__()
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = fan_in ** -0.5
            self.weights.append(nn.Parameter((torch.rand(n_tasks, fan_in, fan_out, generator=generator) * 2 - 1) * bound))
            self.biases.append(nn.Parameter((torch.rand(n_tasks, 1, fan_out, generator=generator) * 2 - 1) * bound))
        self.dropout = dropout

    def forward(self, inputs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        h = inputs
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, w)
            if i < len(self.weights) - 1:
                h = F.relu(h)
                if self.training and self.dropout > 0:
                    keep = (torch.rand(h.shape, generator=generator).to(h.device) >= self.dropout).to(h)
                    h = h * keep / (1 - self.dropout)
        return h


def mlp_predict(net: TaskNetworks, x: torch.Tensor, m: torch.Tensor, generator=None):
    """Masked-MLP predictive: input $[x \\odot m, m]$, output mean and $\\sigma = 0.05 + 0.95\\,\\mathrm{softplus}$."""
    out = net(torch.cat([x * m, m], dim=-1), generator)
    return out[..., 0], 0.05 + 0.95 * F.softplus(out[..., 1])


def fit_masked_mlp(x, y, r, epochs: int, seed: int, hidden: int = 64, lr: float = 1e-3, weight_decay: float = 0.01,
                   dropout: float = 0.2, on_epoch=None) -> TaskNetworks:
    """The per-task masked MLP (two hidden layers, dropout, AdamW with weight decay), trained
    full-batch on each task's context rows ``x, y, r`` (tasks, rows, ...) for ``epochs`` steps, each
    with fresh random acquisition states inside the rows' availability. (The number of epochs is
    tuned per context size on prior tasks: :func:`replib.papers.l2m.experiment.tune_epochs`, which
    reads the network after every epoch through ``on_epoch(epoch, net)``.) The networks live on
    ``x``'s device."""
    generator = torch.Generator().manual_seed(seed)
    d = x.shape[-1]
    net = TaskNetworks(x.shape[0], [2 * d, hidden, hidden, 2], dropout, generator).to(x.device)
    optimiser = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    net.train()
    for epoch in range(epochs):
        m = acquisition_state(r, generator)
        loss = gaussian_nll(*mlp_predict(net, x, m, generator), y).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if on_epoch is not None:
            net.eval()
            on_epoch(epoch + 1, net)
            net.train()
    net.eval()
    return net


def fit_gdfs_selector(predictor: TaskNetworks, x, y, r, epochs: int, seed: int, hidden: int = 64, lr: float = 1e-3,
                      tau: float = 0.5, on_epoch=None) -> TaskNetworks:
    """GDFS-style greedy selector per task: an MLP from $[x \\odot m, m]$ to $d$ logits trained on the
    frozen masked MLP with the same one-step objective as L2M's selector (blocked straight-through
    Gumbel pick at a random state, NLL after the pick), on the task's context rows, full batch, at a
    constant learning rate. ``on_epoch(epoch, selector)``, if given, is called after every epoch."""
    generator = torch.Generator().manual_seed(seed + 7)
    d = x.shape[-1]
    selector = TaskNetworks(x.shape[0], [2 * d, hidden, d], 0.0, generator).to(x.device)
    optimiser = torch.optim.Adam(selector.parameters(), lr=lr)
    for p in predictor.parameters():
        p.requires_grad_(False)
    for epoch in range(epochs):
        m = acquisition_state(r, generator)
        available = r * (1 - m)
        logits = selector(torch.cat([x * m, m], dim=-1)).masked_fill(available == 0, -1e8)
        s = straight_through_gumbel(logits, tau, generator)
        counted = (available.sum(dim=-1) > 0).float()
        nll = gaussian_nll(*mlp_predict(predictor, x, m + (1 - m) * s), y)
        loss = (nll * counted).sum() / counted.sum().clamp(min=1)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if on_epoch is not None:
            on_epoch(epoch + 1, selector)
    for p in predictor.parameters():
        p.requires_grad_(True)
    return selector


@torch.no_grad()
def mlp_acquisition(predictor: TaskNetworks, selector: TaskNetworks | None, x, y, generator=None):
    """:func:`greedy_acquisition` with the per-task MLP, picks by the GDFS selector (or random
    when ``selector`` is None)."""
    def select(xq, m):
        return selector(torch.cat([xq * m, m], dim=-1))

    return greedy_acquisition(lambda xq, m: mlp_predict(predictor, xq, m), select if selector is not None else None,
                              x, y, generator)
