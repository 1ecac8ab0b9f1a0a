"""A small multilayer perceptron classifier and its training loop (torch, CPU-friendly).

Shared by chapters that need a quick classifier: :class:`MLP` (Linear layers with ReLU between them
by default; tanh and linear hidden layers on request, e.g. for an autoencoder),
:func:`train_classifier` (minibatch SGD with momentum, weight decay and a OneCycle learning-rate
schedule, over a fixed number of epochs or of steps), :func:`embed` (the last hidden layer),
:func:`predict_proba` and :func:`accuracy`.

Speed. The loop works on whole tensors (one ``randperm`` per epoch, index slicing per minibatch, no
``DataLoader``), so a 64-128-10 network makes several thousand SGD steps per second on one CPU core.
For such small networks one torch thread is usually fastest; the thread count is left to the caller
(``torch.set_num_threads``).

Determinism. Initial weights come from ``torch.manual_seed(seed)`` inside a forked RNG state and
minibatch orders from a private ``torch.Generator`` seeded with the training seed, so the global
torch RNG is neither used nor changed: the same seed, data and thread count give the same model.
"""

from __future__ import annotations

import math
import time
from collections import deque

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["ACTIVATIONS", "MLP", "train_classifier", "embed", "predict_proba", "accuracy"]


ACTIVATIONS = {"relu": F.relu, "tanh": torch.tanh, "silu": F.silu}


class MLP(nn.Module):
    """Fully connected network ``sizes = [d_in, h_1, ..., h_k, n_classes]`` with an activation after
    every hidden layer (none after the output layer, which returns logits).

    ``activation`` is ``"relu"`` (default), ``"tanh"`` or ``"silu"``; ``linear_hidden`` lists 0-based indices of
    hidden layers left linear (no activation), e.g. ``MLP([64, 128, 64, 16, 64, 128, 64],
    activation="tanh", linear_hidden=[2])`` is a deep autoencoder with a linear 16-d bottleneck.
    The defaults give exactly the original ReLU network (same weights, same outputs).

    ``seed`` fixes the initial weights (torch's default Linear initialisation drawn under
    ``torch.manual_seed(seed)`` without touching the global RNG); ``None`` draws from the global RNG.
    """

    def __init__(self, sizes, seed: int | None = 0, activation: str = "relu", linear_hidden=()):
        super().__init__()
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2:
            raise ValueError(f"an MLP needs at least input and output sizes, got {sizes}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
        linear = frozenset(int(i) for i in linear_hidden)
        if any(i < 0 or i >= len(sizes) - 2 for i in linear):
            raise ValueError(f"linear_hidden {sorted(linear)} must index hidden layers 0..{len(sizes) - 3}")
        self.sizes = sizes
        self.activation = activation
        self.linear_hidden = linear
        self._acts = [None if i in linear else ACTIVATIONS[activation] for i in range(len(sizes) - 2)]
        if seed is None:
            self._build(sizes)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed))
                self._build(sizes)

    def _build(self, sizes) -> None:
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Activations of the last hidden layer (after its activation); the input itself if there is
        none."""
        for layer, act in zip(self.layers[:-1], self._acts):
            x = layer(x) if act is None else act(layer(x))
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits."""
        return self.layers[-1](self.hidden(x))


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _as_tensor(X, model: nn.Module, dtype=torch.float32) -> torch.Tensor:
    return torch.as_tensor(np.asarray(X), dtype=dtype, device=_device(model))


def train_classifier(
    model: nn.Module,
    X,
    y,
    epochs: int | None = 15,
    batch_size: int = 64,
    lr: float = 0.05,
    momentum: float = 0.9,
    weight_decay: float = 5e-4,
    seed: int = 0,
    steps: int | None = None,
    label_smoothing: float = 0.0,
    cycle_momentum: bool = False,
) -> dict:
    """Train ``model`` in place with cross-entropy, SGD (momentum, weight decay) and OneCycle LR.

    The budget is either ``epochs`` passes over ``(X, y)`` (each a fresh random permutation cut into
    minibatches of ``batch_size``, the last one possibly smaller), so that the cost is proportional
    to the number of samples, or, when ``steps`` is given, exactly ``steps`` minibatches (epochs are
    chained until the count is reached). The learning rate follows ``OneCycleLR`` with peak ``lr``
    over all the steps (torch's defaults otherwise: 30% warm-up, cosine annealing); with
    ``cycle_momentum=False`` (default) the SGD momentum stays at ``momentum``.

    Returns ``{"steps", "seconds", "final_loss"}`` (wall-clock seconds of the loop; ``final_loss`` the
    mean loss of the last epoch, or of the last up-to-``len(X) / batch_size`` steps).
    """
    Xt = _as_tensor(X, model)
    yt = torch.as_tensor(np.asarray(y), dtype=torch.long, device=Xt.device)
    n = int(Xt.shape[0])
    if n == 0:
        raise ValueError("cannot train on an empty set")
    per_epoch = math.ceil(n / batch_size)
    if steps is None:
        if epochs is None:
            raise ValueError("give epochs or steps")
        total = int(epochs) * per_epoch
    else:
        total = int(steps)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    opt = torch.optim.SGD(
        model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay
    )
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=max(total, 2), cycle_momentum=cycle_momentum
    )
    model.train()
    start = time.perf_counter()
    done = 0
    recent: deque = deque(maxlen=per_epoch)
    while done < total:
        perm = torch.randperm(n, generator=gen).to(Xt.device)
        for k in range(0, n, batch_size):
            if done >= total:
                break
            idx = perm[k : k + batch_size]
            loss = F.cross_entropy(model(Xt[idx]), yt[idx], label_smoothing=label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if done < max(total, 2) - 1:
                sched.step()
            done += 1
            recent.append(loss.detach())
    seconds = time.perf_counter() - start
    model.eval()
    final = float(torch.stack(list(recent)).mean()) if recent else float("nan")
    return {"steps": done, "seconds": seconds, "final_loss": final}


@torch.no_grad()
def embed(model: MLP, X) -> np.ndarray:
    """Last hidden layer of ``model`` for every row of ``X`` (float32 numpy array, n x h_k)."""
    model.eval()
    return model.hidden(_as_tensor(X, model)).cpu().numpy()


@torch.no_grad()
def predict_proba(model: nn.Module, X) -> np.ndarray:
    """Softmax class probabilities (float64 numpy array, n x n_classes)."""
    model.eval()
    logits = model(_as_tensor(X, model)).double()
    return torch.softmax(logits, dim=1).cpu().numpy()


@torch.no_grad()
def accuracy(model: nn.Module, X, y) -> float:
    """Share of rows whose arg-max logit equals the label (a fraction in [0, 1])."""
    model.eval()
    pred = model(_as_tensor(X, model)).argmax(dim=1).cpu().numpy()
    return float(np.mean(pred == np.asarray(y)))
