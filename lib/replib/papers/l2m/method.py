"""L2M, the method: tokens, the attention masks, the in-context transformer with its predictor
and selector heads, the prequential pre-training loss with acquisition-state augmentation, the
straight-through Gumbel selector objective and greedy test-time acquisition.

Contents: :func:`gaussian_nll`, :func:`context_tokens`, :func:`query_tokens`, :func:`attention_mask`, :class:`L2M`,
:func:`acquisition_state`, :func:`prequential_nll`, :func:`train_predictor`,
:func:`straight_through_gumbel`, :func:`selector_loss`, :func:`train_selector`,
:func:`greedy_acquisition`, :func:`l2m_acquisition`, :func:`empty_state_hidden`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "gaussian_nll",
    "context_tokens",
    "query_tokens",
    "attention_mask",
    "L2M",
    "acquisition_state",
    "prequential_nll",
    "train_predictor",
    "straight_through_gumbel",
    "selector_loss",
    "train_selector",
    "greedy_acquisition",
    "l2m_acquisition",
    "empty_state_hidden",
]


def gaussian_nll(mean, std, y):
    """The predictive loss: negative log-likelihood of ``y`` under $N(\\mu, \\sigma^2)$, elementwise (numpy or torch)."""
    lib = np if isinstance(y, np.ndarray) else __import__("torch")
    return 0.5 * ((y - mean) / std) ** 2 + lib.log(std) + 0.5 * math.log(2 * math.pi)


def context_tokens(x: torch.Tensor, r: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Context (and real-target) token of a row: $[x \\odot r,\\ r,\\ y]$ (width $2d + 1$)."""
    return torch.cat([x * r, r, y[..., None]], dim=-1)


def query_tokens(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Query token at acquisition state $m$: $[x \\odot m,\\ m,\\ 0]$ (the label slot is zero)."""
    return torch.cat([x * m, m, torch.zeros_like(x[..., :1])], dim=-1)


def attention_mask(n_context: int, n_target: int, autoregressive: bool, device="cpu") -> torch.Tensor:
    """The additive attention mask (0 = may attend, $-\\infty$ = may not), rows attend to columns, on ``device``.

    Autoregressive (pre-training) sequence [context | real targets | queries]: context attends to
    context; real target $i$ to the context and real targets $j \\le i$; query $i$ to the context, real
    targets $j < i$ and itself. Inference sequence [context | queries]: query $i$ attends to the
    context and itself only. So no query ever sees its own label or a later target's.
    """
    n_real = n_target if autoregressive else 0
    size = n_context + n_real + n_target
    allowed = torch.zeros(size, size, dtype=torch.bool, device=device)
    allowed[:, :n_context] = True
    lower = torch.ones(n_target, n_target, dtype=torch.bool, device=device)
    q0 = n_context + n_real
    if autoregressive:
        t0 = n_context
        allowed[t0:q0, t0:q0] = torch.tril(lower)
        allowed[q0:, t0:q0] = torch.tril(lower, diagonal=-1)
    allowed[q0:, q0:] = torch.eye(n_target, dtype=torch.bool, device=device)
    mask = torch.zeros(size, size, device=device)
    mask[~allowed] = float("-inf")
    return mask


class _ResidualEmbedder(nn.Module):
    """Token embedder: a GELU MLP plus a linear projection skip, then LayerNorm (the code's
    residual MLP, two layers instead of four)."""

    def __init__(self, d_in: int, hidden: int, width: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, width))
        self.skip = nn.Linear(d_in, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, tokens):
        return self.norm(self.mlp(tokens) + self.skip(tokens))


class L2M(nn.Module):
    """The in-context model: embedder, post-norm transformer encoder (GELU, no dropout), a Gaussian
    predictor head (mean and $\\sigma = 0.05 + 0.95\\,\\mathrm{softplus}(\\cdot)$) and a selector head
    with $d$ logits (last layer orthogonal, gain 0.01, bias 0), all read at the query tokens."""

    def __init__(self, d: int, width: int = 48, n_layers: int = 2, n_heads: int = 4, ff: int = 96,
                 hidden: int = 96):
        super().__init__()
        self.d = d
        self.embed = _ResidualEmbedder(2 * d + 1, hidden, width)
        layer = nn.TransformerEncoderLayer(width, n_heads, ff, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.predictor = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, 2))
        self.selector = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, d))
        nn.init.orthogonal_(self.selector[-1].weight, gain=0.01)
        nn.init.zeros_(self.selector[-1].bias)

    def encode(self, context: torch.Tensor, queries: torch.Tensor, targets: torch.Tensor | None = None):
        """Hidden states at the query tokens; with ``targets`` (real targets with their labels) the
        autoregressive mask, else the inference mask of :func:`attention_mask`."""
        parts = [context] + ([targets] if targets is not None else []) + [queries]
        mask = attention_mask(context.shape[1], queries.shape[1], autoregressive=targets is not None,
                              device=context.device)
        hidden = self.encoder(self.embed(torch.cat(parts, dim=1)), mask=mask)
        return hidden[:, -queries.shape[1]:]

    def predict(self, hidden: torch.Tensor):
        """Predictive mean and standard deviation from query hidden states."""
        out = self.predictor(hidden)
        return out[..., 0], 0.05 + 0.95 * F.softplus(out[..., 1])


def acquisition_state(r: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A random acquisition state per row: a depth $k$ uniform on $0..n_{avail}$, then $k$ of the row's
    available features (``r`` = 1) chosen uniformly, i.e. the state after $k$ random acquisitions.
    (The code loops over all depths; we draw one per row and step, our choice for the book budget.)
    The uniforms are drawn on the CPU generator and moved to ``r``'s device."""
    scores = torch.rand(r.shape, generator=generator).to(r.device).masked_fill(r == 0, 2.0)
    rank = scores.argsort(dim=-1).argsort(dim=-1)
    n_avail = r.sum(dim=-1, keepdim=True)
    depth = torch.floor(torch.rand(n_avail.shape, generator=generator).to(r.device) * (n_avail + 1))
    return ((rank < depth) & (r == 1)).float()


def prequential_nll(model: L2M, batch: dict, n_context: int, generator: torch.Generator) -> torch.Tensor:
    """The pre-training loss: $-\\frac{1}{N_t}\\sum_i \\log p_\\theta(y_i \\mid \\mathcal D_c,
    (x_j \\odot r_j, r_j, y_j)_{j<i}, x_i \\odot m_i, m_i)$ with $m_i$ a random acquisition state inside
    the target's own availability $r_i$ (retrospective missingness also hits training targets).
    ``batch`` holds torch tensors x, y, r of shape (tasks, rows, ...); the first ``n_context`` rows
    are the context."""
    x, y, r = batch["x"], batch["y"], batch["r"]
    context = context_tokens(x[:, :n_context], r[:, :n_context], y[:, :n_context])
    xt, yt, rt = x[:, n_context:], y[:, n_context:], r[:, n_context:]
    m = acquisition_state(rt, generator)
    hidden = model.encode(context, query_tokens(xt, m), targets=context_tokens(xt, rt, yt))
    mean, std = model.predict(hidden)
    return gaussian_nll(mean, std, yt).mean()


def _schedule(step: int, steps: int, warmup: int) -> float:
    """Linear warm-up then linear decay to zero (the code's schedule shape)."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (steps - step) / max(1, steps - warmup))


def train_predictor(model: L2M, draw_batch, steps: int, lr: float, seed: int, context_range=(4, 32)) -> list:
    """Autoregressive pre-training: ``steps`` Adam steps on :func:`prequential_nll`, each on a fresh
    batch ``draw_batch(rng)`` of tasks whose context size is drawn uniformly from ``context_range``.
    Returns the loss per step."""
    rng = np.random.default_rng([seed, 1])
    generator = torch.Generator().manual_seed(seed)
    params = [p for name, p in model.named_parameters() if not name.startswith("selector")]
    optimiser = torch.optim.Adam(params, lr=lr)
    warmup = max(1, steps // 10)
    losses = []
    for step in range(steps):
        for group in optimiser.param_groups:
            group["lr"] = lr * _schedule(step, steps, warmup)
        n_context = int(rng.integers(context_range[0], context_range[1] + 1))
        loss = prequential_nll(model, draw_batch(rng), n_context, generator)
        optimiser.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        optimiser.step()
        losses.append(float(loss.detach()))
    return losses


def straight_through_gumbel(logits: torch.Tensor, tau: float, generator: torch.Generator) -> torch.Tensor:
    """A one-hot sample of $\\mathrm{softmax}((\\ell + g)/\\tau)$, $g$ Gumbel noise, whose gradient is
    that of the soft sample (the straight-through estimator). The uniforms come from the CPU generator."""
    u = torch.rand(logits.shape, generator=generator).to(logits.device).clamp(1e-10, 1 - 1e-10)
    soft = F.softmax((logits - torch.log(-torch.log(u))) / tau, dim=-1)
    hard = F.one_hot(soft.argmax(dim=-1), logits.shape[-1]).to(soft)
    return hard + soft - soft.detach()


def selector_loss(model: L2M, context: torch.Tensor, x: torch.Tensor, y: torch.Tensor, r: torch.Tensor,
                  tau: float, generator: torch.Generator) -> torch.Tensor:
    """The amortised greedy-CMI objective at a random state $m$: selector logits at the query,
    blocked to the available, unacquired features $(1 - m) \\odot r$, a straight-through Gumbel
    one-hot $s$, and the NLL $-\\log p_\\theta(y \\mid x \\odot \\max(m, s), \\max(m, s); \\mathcal D_c)$.
    Minimising the expected next-step NLL over $j$ maximises $I(Y; X_j \\mid \\underline x_t)$
    (Covert et al.). Rows with nothing left to acquire do not count."""
    m = acquisition_state(r, generator)
    available = r * (1 - m)
    logits = model.selector(model.encode(context, query_tokens(x, m)))
    s = straight_through_gumbel(logits.masked_fill(available == 0, -1e8), tau, generator)
    m_next = m + (1 - m) * s
    mean, std = model.predict(model.encode(context, query_tokens(x, m_next)))
    counted = (available.sum(dim=-1) > 0).float()
    return (gaussian_nll(mean, std, y) * counted).sum() / counted.sum().clamp(min=1)


def train_selector(model: L2M, draw_batch, steps: int, lr: float, head_lr: float, tau: float, n_context_range,
                   seed: int, on_step=None) -> list:
    """Policy training: the embedder and encoder frozen, the selector head trained at ``lr`` and the
    predictor head at ``head_lr`` on :func:`selector_loss` (constant learning rates, so reading the
    model after $s$ steps is the same as a run of $s$ steps); the states come from random
    acquisitions (as in the official code), not from the policy's own roll-outs. ``on_step(step,
    model)``, if given, is called after every step (1-based) with the model in its current state.
    Returns the loss per step."""
    rng = np.random.default_rng([seed, 2])
    generator = torch.Generator().manual_seed(seed + 1)
    for p in [*model.embed.parameters(), *model.encoder.parameters()]:
        p.requires_grad_(False)
    optimiser = torch.optim.Adam([{"params": model.selector.parameters(), "lr": lr},
                                  {"params": model.predictor.parameters(), "lr": head_lr}])
    losses = []
    for _ in range(steps):
        n_context = int(rng.integers(n_context_range[0], n_context_range[1] + 1))
        batch = draw_batch(rng)
        context = context_tokens(batch["x"][:, :n_context], batch["r"][:, :n_context], batch["y"][:, :n_context])
        tail = slice(n_context, None)
        loss = selector_loss(model, context, batch["x"][:, tail], batch["y"][:, tail], batch["r"][:, tail], tau,
                             generator)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(len(losses), model)
    for p in model.parameters():
        p.requires_grad_(True)
    return losses


def greedy_acquisition(predict, select, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator | None = None):
    """Test-time acquisition (targets fully available): from $m = 0$, NLL of $p(y \\mid x \\odot m, m)$,
    then add $\\arg\\max_j$ of ``select(x, m)`` over the unacquired features (``select=None``: a
    uniformly random unacquired feature), $d$ times. ``predict(x, m) -> (mean, std)``. Returns the NLL
    per target and depth, shape (..., d + 1), and the picks (..., d)."""
    d = x.shape[-1]
    m = torch.zeros_like(x)
    nlls, picks = [], []
    for _ in range(d):
        nlls.append(gaussian_nll(*predict(x, m), y))
        scores = torch.rand(m.shape, generator=generator).to(m.device) if select is None else select(x, m)
        pick = scores.masked_fill(m == 1, float("-inf")).argmax(dim=-1)
        m = m + F.one_hot(pick, d).to(m)
        picks.append(pick)
    nlls.append(gaussian_nll(*predict(x, m), y))
    return torch.stack(nlls, dim=-1), torch.stack(picks, dim=-1)


@torch.no_grad()
def l2m_acquisition(model: L2M, context: torch.Tensor, x: torch.Tensor, y: torch.Tensor, policy: str,
                    generator: torch.Generator | None = None, importance: torch.Tensor | None = None):
    """:func:`greedy_acquisition` with the L2M predictor in context, the selector head
    (``policy="l2m"``), random picks (``policy="random"``) or the oracle order (``policy="oracle"``:
    the task's features by decreasing ``importance``, shape (tasks, d), their weight in the label;
    an upper-bound arm that reads the task's generator, which no model sees)."""
    def predict(xq, m):
        return model.predict(model.encode(context, query_tokens(xq, m)))

    def select(xq, m):
        return model.selector(model.encode(context, query_tokens(xq, m)))

    def oracle(xq, m):
        return importance[:, None, :].expand_as(m)

    chosen = {"l2m": select, "random": None, "oracle": oracle}[policy]
    return greedy_acquisition(predict, chosen, x, y, generator)


@torch.no_grad()
def empty_state_hidden(model: L2M, context: torch.Tensor) -> torch.Tensor:
    """The hidden state the selector reads for a task's first pick: the query token at $m = 0$ is
    $[0, 0, 0]$ whatever the target, so this state depends on the context alone; shape (tasks, width)."""
    zeros = torch.zeros(context.shape[0], 1, model.d, device=context.device)
    return model.encode(context, query_tokens(zeros, zeros))[:, 0]
