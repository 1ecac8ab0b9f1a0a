"""The toy world: digit images drawn from a Gaussian mixture fitted to scikit-learn's digits, with
injected redundancy; the proxy run on them (Algorithm 1 step 1 with the chapter's MLP), the target
model whose test accuracy scores a kept subset, the test set's noise floor, the subset diagnostics,
and the synthetic instances (tiny complete graphs for the guarantee, a 20,000-point graph for
timing)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .method import edge_matrix, graph_objective, normalise, predictive_entropy

__all__ = [
    "N_TEST",
    "N_ORIGINAL",
    "HIDDEN",
    "N_CLASSES",
    "DigitGenerator",
    "fit_digit_generator",
    "DigitsPool",
    "load_digits_with_redundancy",
    "ProxyScores",
    "train_proxy",
    "train_target",
    "train_targets",
    "init_seeds",
    "MLP_FLOPS",
    "training_flops",
    "proxy_flops",
    "accuracy_noise_floor",
    "subset_stats",
    "synthetic_graph",
    "random_instance",
]

N_TEST = 100_000  # test images drawn from the digit generator (one image = 0.001 points)
N_ORIGINAL = 1297  # distinct images in the pool before redundancy is injected
HIDDEN = 128  # proxy / target hidden width (64-128-10)
N_CLASSES = 10


# --------------------------------------------------------------------------------------------
# 1. Data: generated digits with injected redundancy
# --------------------------------------------------------------------------------------------


@dataclass
class DigitGenerator:
    """A class-conditional Gaussian mixture over 8 x 8 digit images: for class c, component k has
    weight ``weights[c, k]``, mean ``means[c, k]`` (64,) and covariance ``chol[c, k] chol[c, k]^T``."""

    weights: np.ndarray
    means: np.ndarray
    chol: np.ndarray

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """n images (float32, clipped to [0, 1]) and their labels: label uniform over the 10 classes,
        then a component by ``weights``, then mean + chol @ N(0, I)."""
        y = rng.integers(N_CLASSES, size=int(n))
        X = np.empty((int(n), self.means.shape[-1]))
        for c in range(N_CLASSES):
            idx = np.flatnonzero(y == c)
            comp = rng.choice(self.weights.shape[1], size=idx.size, p=self.weights[c])
            noise = rng.normal(size=(idx.size, X.shape[1]))
            for k in range(self.weights.shape[1]):
                rows = comp == k
                X[idx[rows]] = self.means[c, k] + noise[rows] @ self.chol[c, k].T
        return np.clip(X, 0.0, 1.0).astype(np.float32), y.astype(np.int64)


def fit_digit_generator(components: int = 5, reg_covar: float = 0.01) -> DigitGenerator:
    """A generator of digit-like images: one Gaussian mixture per class (``components`` = 5
    full-covariance components, ``reg_covar`` = 0.01 added to each diagonal, scikit-learn's EM with
    ``random_state = 0``) fitted to all 1,797 of scikit-learn's digits, pixels scaled to [0, 1].

    The digits ship only 1,797 images, so a held-out split would be a few hundred images (one image =
    0.2 points at 500); the generator gives as many independent test images as the noise floor needs."""
    from sklearn.datasets import load_digits
    from sklearn.mixture import GaussianMixture

    digits = load_digits()
    X_all = digits.data / 16.0
    fits = [
        GaussianMixture(components, covariance_type="full", reg_covar=reg_covar, random_state=0)
        .fit(X_all[digits.target == c])
        for c in range(N_CLASSES)
    ]
    return DigitGenerator(
        weights=np.stack([f.weights_ for f in fits]),
        means=np.stack([f.means_ for f in fits]),
        chol=np.stack([np.linalg.cholesky(f.covariances_) for f in fits]),
    )


@dataclass
class DigitsPool:
    """The training pool (with injected copies) and the fixed test set.

    ``X`` (N x 64, float32 in [0, 1]), ``y`` (N,), ``X_test``, ``y_test``; ``is_dup[i]`` is True for an
    injected copy; ``origin[i]`` is the pool index of the original image of item i (i itself for an
    original); ``n_original`` originals come first, copies after them.
    """

    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    is_dup: np.ndarray
    origin: np.ndarray
    n_original: int

    @property
    def n(self) -> int:
        """Pool size N."""
        return int(self.y.size)


def load_digits_with_redundancy(
    rng: np.random.Generator,
    generator: DigitGenerator | None = None,
    n_original: int = N_ORIGINAL,
    n_test: int = N_TEST,
    dup_fraction: float = 0.3,
    copies: int = 4,
    jitter: float = 0.03,
    test_seed: int = 0,
) -> DigitsPool:
    """Generated digits (:func:`fit_digit_generator`) with redundancy injected.

    The test set is ``n_test`` = 100,000 images drawn with ``default_rng(test_seed)``, the same for
    every seed; the pool's ``n_original`` = 1,297 originals are drawn with ``rng``. Then
    ``round(dup_fraction * 1297)`` = 389 pool images, drawn with ``rng``, are each copied ``copies`` = 4
    times with N(0, jitter^2) pixel noise (jitter = 0.03), clipped to [0, 1]: N = 1,297 + 4 x 389 =
    2,853. Labels stay clean.
    """
    generator = fit_digit_generator() if generator is None else generator
    X_test, y_test = generator.sample(np.random.default_rng(test_seed), n_test)
    X0, y0 = generator.sample(rng, n_original)
    src = np.sort(rng.choice(n_original, size=int(round(dup_fraction * n_original)), replace=False))
    rep = np.repeat(src, int(copies))
    noise = rng.normal(0.0, jitter, size=(rep.size, X0.shape[1]))
    X_copy = np.clip(X0[rep] + noise, 0.0, 1.0).astype(np.float32)
    return DigitsPool(
        X=np.concatenate([X0, X_copy]),
        y=np.concatenate([y0, y0[rep]]),
        X_test=X_test,
        y_test=y_test,
        is_dup=np.concatenate([np.zeros(n_original, bool), np.ones(rep.size, bool)]),
        origin=np.concatenate([np.arange(n_original), rep]),
        n_original=int(n_original),
    )


# --------------------------------------------------------------------------------------------
# 2. Proxy scores: intrinsic value (Eq. 2) and embeddings
# --------------------------------------------------------------------------------------------


@dataclass
class ProxyScores:
    """Output of the proxy run: ``entropy`` (I_in, N), ``embeddings`` (N x 128), ``probs`` (N x 10),
    ``seconds`` (training + scoring pass), ``test_accuracy`` (percent, NaN without a test set)."""

    entropy: np.ndarray
    embeddings: np.ndarray
    probs: np.ndarray
    seconds: float
    test_accuracy: float


def train_proxy(
    X,
    y,
    steps: int = 150,
    seed: int = 0,
    hidden: int = HIDDEN,
    batch_size: int = 64,
    lr: float = 0.05,
    X_test=None,
    y_test=None,
) -> ProxyScores:
    """Step 1 of Algorithm 1: a proxy MLP 64-128-10 trained ``steps`` = 150 SGD steps (batch 64,
    momentum 0.9, wd 5e-4, OneCycle peak lr 0.05) on the whole pool; returns each sample's predictive
    entropy (Eq. 2) and last-hidden-layer embedding. Model seed ``10_000 + seed``."""
    from replib.models.mlp import MLP, accuracy, embed, predict_proba, train_classifier

    start = time.perf_counter()
    model = MLP([np.shape(X)[1], hidden, N_CLASSES], seed=10_000 + int(seed))
    train_classifier(model, X, y, steps=steps, batch_size=batch_size, lr=lr, seed=10_000 + int(seed))
    probs = predict_proba(model, X)
    z = embed(model, X)
    seconds = time.perf_counter() - start
    acc = 100.0 * accuracy(model, X_test, y_test) if X_test is not None else float("nan")
    return ProxyScores(predictive_entropy(probs), z, probs, seconds, acc)


# --------------------------------------------------------------------------------------------
# 3. The target model and subset statistics
# --------------------------------------------------------------------------------------------


def train_target(X, y, X_test, y_test, epochs: int = 15, seed: int = 0) -> dict:
    """The target model: MLP 64-128-10 from scratch on (X, y), SGD momentum 0.9, wd 5e-4, OneCycle
    peak lr 0.05, batch 64, ``epochs`` passes over the subset (cost proportional to its size).
    Returns ``{"accuracy" (percent on the test split), "train_seconds"}``; model seed ``seed``."""
    from replib.models.mlp import MLP, accuracy, train_classifier

    model = MLP([np.shape(X)[1], HIDDEN, N_CLASSES], seed=int(seed))
    info = train_classifier(model, X, y, epochs=epochs, batch_size=64, lr=0.05, seed=int(seed))
    return {"accuracy": 100.0 * accuracy(model, X_test, y_test), "train_seconds": info["seconds"]}


def init_seeds(seed: int, inits: int) -> list[int]:
    """Model seeds of the ``inits`` initialisations trained on every kept subset of one seed:
    ``100 seed + k`` for k = 0 .. inits - 1, the same for every selector (paired comparisons)."""
    return [100 * int(seed) + k for k in range(int(inits))]


def train_targets(X, y, subsets, X_test, y_test, epochs: int = 15, seeds=(0,), batch_size: int = 64,
                  lr: float = 0.05, momentum: float = 0.9, weight_decay: float = 5e-4,
                  hidden: int = HIDDEN, test_chunk: int = 2048, test_group: int = 4) -> dict:
    """The target model of :func:`train_target`, trained on many kept subsets and initialisations at once.

    ``subsets``: a list of index arrays into (X, y), all of the same size b; ``seeds``: the model seeds.
    Model (s, k) is MLP 64-128-10 with seed ``seeds[k]`` (its initial weights and its minibatch order,
    exactly as :func:`train_target` with that seed) trained on ``subsets[s]``. The M = len(subsets) x
    len(seeds) models are one batched network (weights stacked along a leading model axis, batched
    matrix products); the loss is the sum over models of each model's mean cross-entropy on its own
    minibatch, so every model gets the gradient of its own loss, and SGD (momentum, weight decay) and
    the OneCycle schedule act elementwise, as in :func:`replib.models.mlp.train_classifier`.

    Returns ``{"accuracy": (len(subsets), len(seeds)) percent on the test split, "steps", "seconds",
    "params"}``, the trained weights [W0, b0, W1, b1], each with leading axes (subset, seed) and
    torch's Linear layout (out, in).
    """
    import torch
    from torch.nn import functional as F

    from replib.models.mlp import MLP

    subsets = [np.asarray(S, dtype=np.int64) for S in subsets]
    b = subsets[0].size
    if b == 0 or any(S.size != b for S in subsets):
        raise ValueError("train_targets needs non-empty subsets of one size")
    seeds = [int(s) for s in seeds]
    n_sub, n_seed = len(subsets), len(seeds)
    M = n_sub * n_seed
    nets = [MLP([np.shape(X)[1], hidden, N_CLASSES], seed=s) for s in seeds]
    stack = [torch.stack([n.layers[i].weight.detach() for n in nets]) for i in (0, 1)]
    bias = [torch.stack([n.layers[i].bias.detach() for n in nets]) for i in (0, 1)]
    # model m = s * n_seed + k: subset s, seed k
    W0 = stack[0].repeat(n_sub, 1, 1).clone().requires_grad_(True)  # (M, hidden, d)
    b0 = bias[0].repeat(n_sub, 1).clone().requires_grad_(True)
    W1 = stack[1].repeat(n_sub, 1, 1).clone().requires_grad_(True)  # (M, 10, hidden)
    b1 = bias[1].repeat(n_sub, 1).clone().requires_grad_(True)
    params = [W0, b0, W1, b1]
    Xt = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    yt = torch.as_tensor(np.asarray(y), dtype=torch.long)
    rows = torch.as_tensor(np.repeat(np.stack(subsets), n_seed, axis=0))  # (M, b) pool indices
    gens = [torch.Generator(device="cpu").manual_seed(seeds[m % n_seed]) for m in range(M)]
    per_epoch = math.ceil(b / batch_size)
    total = int(epochs) * per_epoch
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=max(total, 2),
                                                cycle_momentum=False)
    start = time.perf_counter()
    done = 0
    while done < total:
        perm = torch.stack([torch.randperm(b, generator=g) for g in gens])  # (M, b)
        order = torch.gather(rows, 1, perm)
        for k in range(0, b, batch_size):
            if done >= total:
                break
            idx = order[:, k:k + batch_size]  # (M, B)
            h = torch.relu(torch.baddbmm(b0.unsqueeze(1), Xt[idx], W0.transpose(1, 2)))
            logits = torch.baddbmm(b1.unsqueeze(1), h, W1.transpose(1, 2))  # (M, B, 10)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yt[idx].reshape(-1),
                                   reduction="sum") / idx.shape[1]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if done < max(total, 2) - 1:
                sched.step()
            done += 1
    seconds = time.perf_counter() - start
    correct = torch.zeros(M, dtype=torch.float64)
    Xe = torch.as_tensor(np.asarray(X_test), dtype=torch.float32)
    ye = torch.as_tensor(np.asarray(y_test), dtype=torch.long)
    with torch.no_grad():  # groups of models x chunks of test images, small enough to stay in cache
        W1t = W1.detach().transpose(1, 2)
        for m0 in range(0, M, int(test_group)):
            group = slice(m0, m0 + int(test_group))
            Wcat = W0.detach()[group].reshape(-1, W0.shape[-1]).T.contiguous()  # (d, g hidden)
            bcat = b0.detach()[group].reshape(-1)
            for lo in range(0, Xe.shape[0], int(test_chunk)):
                xe = Xe[lo:lo + int(test_chunk)]
                h = torch.addmm(bcat, xe, Wcat).relu_().reshape(xe.shape[0], -1, hidden).transpose(0, 1)
                logits = torch.baddbmm(b1.detach()[group].unsqueeze(1), h, W1t[group])  # (g, n, 10)
                correct[group] += (logits.argmax(-1) == ye[lo:lo + int(test_chunk)]).sum(1).double()
    acc = (100.0 * correct / max(1, Xe.shape[0])).numpy().reshape(n_sub, n_seed)
    trained = [t.detach().reshape(n_sub, n_seed, *t.shape[1:]) for t in params]
    return {"accuracy": acc, "steps": done, "seconds": seconds, "params": trained}


# FLOPs of one forward pass of the 64-128-10 MLP on one image (a multiply-add counts 2; biases and
# ReLU left out): 2 (64 x 128 + 128 x 10). A training example costs three forward passes (forward,
# and the backward pass's two products), the usual 1 : 2 split.
MLP_FLOPS = 2 * (64 * HIDDEN + HIDDEN * N_CLASSES)


def training_flops(samples: int) -> float:
    """FLOPs of ``samples`` training examples of the MLP (forward and backward: 3 ``MLP_FLOPS``)."""
    return 3.0 * MLP_FLOPS * int(samples)


def proxy_flops(steps: int, batch_size: int, n: int) -> float:
    """FLOPs of the proxy (Algorithm 1, step 1): ``steps`` SGD steps over epochs of n images cut into
    minibatches of ``batch_size`` (the last of an epoch smaller, as in ``train_classifier``), then one
    forward pass over the n pool images (entropies and embeddings come from the same pass)."""
    per_epoch = math.ceil(int(n) / int(batch_size))
    full, rest = divmod(int(steps), per_epoch)
    samples = full * int(n) + min(rest * int(batch_size), int(n))
    return training_flops(samples) + float(MLP_FLOPS) * int(n)


def accuracy_noise_floor(accuracy: float, n_test: int = N_TEST) -> float:
    """Standard error, in points, of the difference of two test accuracies near ``accuracy`` (percent)
    that comes from the finite test set alone: 100 sqrt(2 a (1 - a) / n_test) with a = accuracy / 100.
    Exact for two models whose errors are independent; two models that err on the same images
    disagree less, so their paired difference has a smaller error."""
    a = float(accuracy) / 100.0
    return 100.0 * math.sqrt(2.0 * a * (1.0 - a) / int(n_test))


def subset_stats(S, pool: DigitsPool, cluster, I_in, z) -> dict:
    """Diagnostics of a kept set S: ``dup_fraction`` (share of S that are injected copies),
    ``redundant_fraction`` (1 - distinct originals / |S|: items whose original, or another copy of it,
    is also kept), ``clusters_covered`` (distinct neighbourhoods with a kept sample) and ``objective``
    (Eq. 3 with alpha = 1 on the sparsified graph, the same yardstick for every method)."""
    S = np.asarray(S, dtype=np.int64)
    k = max(1, S.size)
    return {
        "dup_fraction": float(pool.is_dup[S].sum() / k),
        "redundant_fraction": float(1.0 - np.unique(pool.origin[S]).size / k) if S.size else 0.0,
        "clusters_covered": int(np.unique(np.asarray(cluster)[S]).size),
        "objective": graph_objective(S, I_in, z, cluster),
    }


# --------------------------------------------------------------------------------------------
# 4. Synthetic graphs: timing instance and tiny guarantee instances
# --------------------------------------------------------------------------------------------


def synthetic_graph(
    rng: np.random.Generator, n: int = 20000, classes: int = 20, clusters: int = 10, dim: int = 128
):
    """Synthetic pruning instance for timing: ``classes x clusters`` cluster centres drawn as random
    unit vectors in R^dim, each of the n points a centre plus N(0, 1/dim) noise (so about as far from
    its centre as the centres are from each other) in a cluster chosen uniformly, and intrinsic scores
    I_in ~ U(0, ln 10). Returns ``(I_in, z, cluster)``."""
    centres = normalise(rng.normal(size=(classes * clusters, dim)))
    cluster = rng.integers(classes * clusters, size=n)
    z = centres[cluster] + rng.normal(scale=1.0 / math.sqrt(dim), size=(n, dim))
    return rng.uniform(0.0, math.log(N_CLASSES), size=n), normalise(z), cluster


def random_instance(rng: np.random.Generator, n: int = 12, alpha: float = 1.0):
    """A tiny complete-graph instance: D_ij ~ U(0, 2) i.i.d. (symmetric, zero diagonal), a = g(D) <= 0,
    w = alpha I_in with I_in ~ U(0, ln 10). Returns ``(w, A)``."""
    D = np.triu(rng.uniform(0.0, 2.0, size=(n, n)), k=1)
    D = D + D.T
    I_in = rng.uniform(0.0, math.log(N_CLASSES), size=n)
    return alpha * I_in, edge_matrix(D=D)
