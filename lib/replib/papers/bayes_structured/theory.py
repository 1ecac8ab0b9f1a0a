"""Helpers of the theory notebook: a perfect model of the T1 data enumerated exactly (greedy, beam
search and the string mode on it, the plug-in risk estimate) and the worked examples."""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

from .baselines import mbr_medoid, semantic_entropy
from .method import N_ITEMS, bayes_response, latent_space
from .task import RHO, hamming_loss

__all__ = [
    "ALL_SETS",
    "set_prior",
    "perfect_next_token_probs",
    "Decoded",
    "perfect_greedy",
    "perfect_beam",
    "string_mode_set",
    "string_mode_size_curve",
    "perfect_model_table",
    "risk_estimates",
    "set_marginals",
    "expected_hamming",
    "three_item_example",
    "medoid_vs_centroid_example",
    "entropy_vs_risk_example",
]

# --------------------------------------------------------------------------------------------
# 1. A perfect model of the T1 data, enumerated exactly
# --------------------------------------------------------------------------------------------

ALL_SETS = latent_space("sets")  # (1024, 10) bool
_SIZES = ALL_SETS.sum(axis=1)
_LOG_FACT = np.array([math.lgamma(m + 1) for m in range(N_ITEMS + 1)])
_TIE = 1e-9  # log-prob differences below this count as ties (exact ties in real arithmetic)


def set_prior(truth, rho: float = RHO) -> tuple[np.ndarray, np.ndarray]:
    """Latent distribution of the perfect model: P(S) = rho^|S xor S*| (1 - rho)^(10 - |S xor S*|)
    for all 1024 sets. Returns ``(sets (1024, 10) bool, probs (1024,))``."""
    truth = np.asarray(truth, dtype=bool)
    flips = (ALL_SETS != truth[None, :]).sum(axis=1)
    probs = rho**flips * (1.0 - rho) ** (N_ITEMS - flips)
    return ALL_SETS, probs


def _prefix_weights(truth, prefix, rho):
    """P(S) * (m - k)! / m! for the sets S containing the k-item prefix (0 for the others)."""
    sets, probs = set_prior(truth, rho)
    prefix = [int(i) for i in prefix]
    if len(set(prefix)) != len(prefix):
        raise ValueError("a prefix cannot repeat an item (probability 0 under the model)")
    k = len(prefix)
    contains = sets[:, prefix].all(axis=1) if k else np.ones(len(sets), dtype=bool)
    logw = np.log(probs) + _LOG_FACT[np.maximum(_SIZES - k, 0)] - _LOG_FACT[_SIZES]
    return np.where(contains, np.exp(logw), 0.0), k


def perfect_next_token_probs(truth, prefix_items, rho: float = RHO) -> np.ndarray:
    """P(next token | prefix) of the perfect model, shape (11,): items A..J then ``<eos>`` (index 10).

    Sum over the sets S containing the prefix with weight P(S) (m - k)!/m! (the probability that a
    random order of S starts with this k-item prefix, m = |S|); the next token is ``<eos>`` if
    m = k, else each of the m - k remaining items with prob. 1/(m - k). Items already in the prefix
    get 0."""
    w, k = _prefix_weights(truth, prefix_items, rho)
    out = np.zeros(N_ITEMS + 1)
    more = _SIZES > k
    out[:N_ITEMS] = (w[more, None] / (_SIZES[more, None] - k) * ALL_SETS[more]).sum(axis=0)
    out[:N_ITEMS][list(prefix_items)] = 0.0
    out[N_ITEMS] = w[~more].sum()
    return out / out.sum()


class Decoded(NamedTuple):
    """A decoded T1 string: ``items`` (item indices in output order), ``latent`` (bool (10,)),
    ``logprob`` (its log-probability under the perfect model, incl. ``<eos>``)."""

    items: list
    latent: np.ndarray
    logprob: float


def _decoded(items, logprob) -> Decoded:
    S = np.zeros(N_ITEMS, dtype=bool)
    S[list(items)] = True
    return Decoded(list(items), S, float(logprob))


def perfect_greedy(truth, rho: float = RHO) -> Decoded:
    """Greedy decoding of the perfect model: the most probable next token at every step (ties ->
    lowest token index, items before ``<eos>``) until ``<eos>``."""
    items: list[int] = []
    lp = 0.0
    while True:
        p = perfect_next_token_probs(truth, items, rho)
        logp = np.log(np.where(p > 0, p, 1e-300))
        tok = int(np.flatnonzero(logp >= logp.max() - _TIE)[0])
        lp += float(np.log(p[tok]))
        if tok == N_ITEMS:
            return _decoded(items, lp)
        items.append(tok)


def perfect_beam(truth, rho: float = RHO, width: int = 5, eos_rule: str = "hf") -> Decoded:
    """Beam search on the perfect model: keep the ``width`` best unfinished strings by sum of
    log-probs (no length penalty). Each step scores every continuation (token of positive
    probability) of every alive hypothesis and sorts them (ties: lexicographic token order). The
    alive set becomes the ``width`` best continuations that do not end in ``<eos>``. Which
    ``<eos>`` continuations become finished hypotheses (kept until the end):

    * ``eos_rule="hf"`` (default; Hugging Face ``generate`` / fairseq): those ranked among the top
      ``width`` of all continuations;
    * ``eos_rule="all"``: every one (each alive hypothesis may stop; the search then returns the
      best *complete* string reachable through the beam).

    Stop when no alive hypothesis can beat the best finished one (log-probs only decrease). Returns
    the best finished string (exact ties: the shortest, then the first in token order, as in
    :func:`string_mode_set`)."""
    if eos_rule not in ("hf", "all"):
        raise ValueError("eos_rule must be 'hf' or 'all'")
    width = int(width)
    alive: list[tuple[float, tuple]] = [(0.0, ())]
    finished: list[tuple[float, tuple]] = []
    while alive:
        cands = []
        for lp, seq in alive:
            p = perfect_next_token_probs(truth, seq, rho)
            for tok in np.flatnonzero(p > 0):
                cands.append((lp + float(np.log(p[tok])), seq + (int(tok),)))
        cands.sort(key=lambda c: (-round(c[0] / _TIE), c[1]))
        ends = [r for r, c in enumerate(cands) if c[1][-1] == N_ITEMS]
        finished += [cands[r] for r in ends if eos_rule == "all" or r < width]
        alive = [c for c in cands if c[1][-1] != N_ITEMS][:width]
        if finished:
            best = max(f[0] for f in finished)
            if not alive or max(a[0] for a in alive) <= best + _TIE:
                break
    best_lp = max(f[0] for f in finished)
    lp, seq = min((f for f in finished if f[0] >= best_lp - _TIE), key=lambda f: (len(f[1]), f[1]))
    return _decoded(seq[:-1], lp)


def string_mode_set(truth, rho: float = RHO) -> np.ndarray:
    """The set of the single most probable string: argmax_S P(S) / |S|! (every one of the |S|!
    orderings of S has that probability). Exact ties (e.g. rho = 0.25: a 3-set and its 2-subsets)
    go to the smaller set, then to the first in enumeration order."""
    _, probs = set_prior(truth, rho)
    score = np.log(probs) - _LOG_FACT[_SIZES]
    best = np.flatnonzero(score >= score.max() - _TIE)
    return ALL_SETS[best[np.argmin(_SIZES[best])]].copy()


def string_mode_size_curve(rho: float = RHO, sizes=range(0, N_ITEMS + 1)) -> np.ndarray:
    """Size of the string-mode set (:func:`string_mode_set`) for a truth of each size in ``sizes``."""
    out = []
    for s in sizes:
        truth = np.arange(N_ITEMS) < int(s)
        out.append(int(string_mode_set(truth, rho).sum()))
    return np.array(out)


def perfect_model_table(rho: float = RHO, sizes=(3, 4, 5, 6, 7), width: int = 5) -> dict:
    """Hamming loss vs S* of each decision rule on the perfect model, per true size (S* = the first
    s items; by symmetry the loss depends only on s). Keys ``sizes``, ``beam``, ``string_mode``,
    ``greedy``, ``majority`` (element-wise majority of the exact marginals q_e), each a list of
    losses; and ``*_size``: the answer's set size. ``beam`` is the standard (Hugging Face) beam
    search, ``beam_all`` the variant that finishes every ``<eos>`` continuation
    (:func:`perfect_beam`)."""
    out: dict = {"sizes": list(sizes)}
    for s in sizes:
        truth = np.arange(N_ITEMS) < int(s)
        sets, probs = set_prior(truth, rho)
        q = probs @ sets
        answers = {
            "beam": perfect_beam(truth, rho, width).latent,
            "beam_all": perfect_beam(truth, rho, width, eos_rule="all").latent,
            "string_mode": string_mode_set(truth, rho),
            "greedy": perfect_greedy(truth, rho).latent,
            "majority": q > 0.5,
        }
        for name, S in answers.items():
            out.setdefault(name, []).append(hamming_loss(S, truth))
            out.setdefault(f"{name}_size", []).append(int(np.sum(S)))
    return out


def risk_estimates(truth, rho: float = RHO, ns=(1, 3, 5, 10, 20, 50), n_repeats: int = 2000,
                   seed: int = 0) -> dict:
    """The plug-in Bayesian risk U = sum_e min(q_e, 1 - q_e) estimated from N noisy sets of the perfect
    T1 model, repeated ``n_repeats`` times per N: keys ``n``, ``mean``, ``sd`` and ``true`` (the risk
    of the exact belief, sum_e min(rho, 1 - rho) = 10 min(rho, 1 - rho))."""
    rng = np.random.default_rng(seed)
    truth = np.asarray(truth, dtype=bool)
    means, sds = [], []
    for n in ns:
        sets = truth[None, None, :] ^ (rng.random((n_repeats, int(n), truth.size)) < rho)
        q = sets.mean(axis=1)
        risk = np.minimum(q, 1.0 - q).sum(axis=1)
        means.append(risk.mean())
        sds.append(risk.std())
    return {"n": list(ns), "mean": np.array(means), "sd": np.array(sds),
            "true": float(truth.size * min(rho, 1.0 - rho))}


# --------------------------------------------------------------------------------------------
# 2. Worked examples (theory chapter)
# --------------------------------------------------------------------------------------------


def _as_bool(S, universe) -> np.ndarray:
    return np.array([u in set(S) for u in universe], dtype=bool)


def _as_items(mask, universe) -> tuple:
    return tuple(u for u, b in zip(universe, mask) if b)


def set_marginals(sets, probs=None) -> np.ndarray:
    """q_e = sum_S p(S) [e in S] for sets given as a bool matrix (rows) and weights (uniform if
    None)."""
    sets = np.asarray(sets, dtype=bool)
    w = np.full(len(sets), 1.0 / len(sets)) if probs is None else np.asarray(probs, dtype=float)
    return w @ sets


def expected_hamming(answer, sets, probs=None) -> float:
    """Expected Hamming loss E_{S ~ p}|answer xor S| (uniform weights if None)."""
    sets = np.asarray(sets, dtype=bool)
    w = np.full(len(sets), 1.0 / len(sets)) if probs is None else np.asarray(probs, dtype=float)
    return float(w @ (sets != np.asarray(answer, dtype=bool)[None, :]).sum(axis=1))


def three_item_example(universe=("A", "B", "C"), set_probs=None) -> dict:
    """Our hand-made string distribution (not from the paper): each set's mass is split evenly over the
    orderings listed. Default: {A,B,C} 0.40 over its 6 orderings, {A} 0.25, {A,B} 0.35 over its
    2 orderings. Returns ``strings`` {tuple: prob}, ``top_string`` (most probable string, "A"),
    ``latent_mode`` (most probable set, {A,B,C}), ``q`` (marginals, (1.0, 0.75, 0.40)),
    ``bayes_set`` ({q_e > 1/2} = {A,B}) and ``losses``: expected Hamming loss of the set of each
    answer ({"top_string": 1.15, "latent_mode": 0.85, "bayes": 0.65})."""
    if set_probs is None:
        set_probs = [(("A", "B", "C"), 0.40, "all"), (("A",), 0.25, "all"), (("A", "B"), 0.35, "all")]
    strings: dict[tuple, float] = {}
    for S, p, orders in set_probs:
        perms = list(itertools.permutations(S)) if orders == "all" else list(orders)
        for s in perms:
            strings[tuple(s)] = strings.get(tuple(s), 0.0) + p / len(perms)
    sets = np.array([_as_bool(S, universe) for S, _, _ in set_probs])
    probs = np.array([p for _, p, _ in set_probs])
    top = max(strings, key=strings.get)
    mode = sets[int(np.argmax(probs))]
    q = set_marginals(sets, probs)
    bayes = q > 0.5
    answers = {"top_string": _as_bool(top, universe), "latent_mode": mode, "bayes": bayes}
    return {
        "universe": tuple(universe),
        "strings": strings,
        "top_string": top,
        "latent_mode": _as_items(mode, universe),
        "q": q,
        "bayes_set": _as_items(bayes, universe),
        "losses": {k: expected_hamming(v, sets, probs) for k, v in answers.items()},
    }


def medoid_vs_centroid_example(samples=None, universe=("A", "B", "C")) -> dict:
    """Centroid vs medoid on sampled sets (default {A,B},{A,C},{B,C},{A,B},{A,C}: q = (0.8, 0.6,
    0.6), so the Bayes set is {A,B,C}, which no sample contains; the medoid is a sampled pair).
    Returns ``q``, ``bayes_set``, ``bayes_risk``, ``medoid_set``, ``medoid_risk`` (its mean
    Hamming distance to the samples) and ``bayes_in_samples``."""
    if samples is None:
        samples = [("A", "B"), ("A", "C"), ("B", "C"), ("A", "B"), ("A", "C")]
    lat = np.array([_as_bool(S, universe) for S in samples])
    bayes, risk = bayes_response("sets", lat)
    medoid, m_risk = mbr_medoid("sets", lat)
    return {
        "universe": tuple(universe),
        "q": set_marginals(lat),
        "bayes_set": _as_items(bayes, universe),
        "bayes_risk": risk,
        "medoid_set": _as_items(medoid, universe),
        "medoid_risk": m_risk,
        "bayes_in_samples": bool((lat == bayes[None, :]).all(axis=1).any()),
    }


def entropy_vs_risk_example(a=(4, 5), b=(0, 10)) -> dict:
    """Two rating beliefs, half the mass on each value: equal semantic entropy (log 2) but very
    different Bayesian risk under |l - l'| (0.5 vs 5.0). Returns {name: {"entropy", "risk"}}."""
    out = {}
    for name, vals in (("close", a), ("far", b)):
        lat = np.asarray(vals, dtype=np.int64)
        out[name] = {"entropy": semantic_entropy("ratings", lat),
                     "risk": bayes_response("ratings", lat)[1]}
    return out
