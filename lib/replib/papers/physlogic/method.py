"""PhysLogic's method: the logicality assessment (Logical Fidelity F, Causal Connection O,
Inferential Progress P, as the official metric code defines them) with an offline TF-IDF sentence
encoder, and logicality-guided selection of training traces (our best-of-K stand-in for the
paper's "data sampling guided by the assessment criteria", whose details could not be read).

Steps of the assessment (numbered as in the chapter):

1. :func:`split_sentences` -- the reasoning into sentences by the regex ``[.!?]+\\s+``.
2. :func:`similarity_matrix` -- M_ij = cos(e(n_i), e(s_j)), nexuses by sentences.
3. :func:`greedy_match` -- greedy one-to-one matching at threshold tau.
4. :func:`fidelity` -- Rec, Prec and F, their harmonic mean.
5. :func:`centroids` and :func:`causal_connection` -- O, the weighted pairwise order agreement.
6. :func:`inferential_progress` -- P, the mean novelty of each sentence's focus.
7. :func:`logicality` -- all of them for one trace (F = O = P = 0 for empty reasoning);
   :func:`assess` scores many traces with one call of the encoder.

Selection: :func:`logicality_score` S = (F + O + P) / 3 (ours) and :func:`select_traces`, one trace
per problem under the three data conditions (logicality-guided, correctness-only, unfiltered).
"""

from __future__ import annotations

import re

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

__all__ = [
    "TAU", "STOP_WORDS", "SENTENCE_SPLIT", "mask_numbers", "TfidfEncoder", "split_sentences", "similarity_matrix", "greedy_match",
    "fidelity", "centroids", "causal_connection", "inferential_progress", "logicality", "assess", "logicality_score",
    "select_traces", "CONDITIONS",
]

TAU = 0.3
SENTENCE_SPLIT = re.compile(r"[.!?]+\s+")
# Words every canonical sentence shares; without them consecutive steps look alike (our pilot, not the paper).
STOP_WORDS = ["by", "the", "of", "law", "s", "so", "answer", "is", "definition", "theorem"]
CONDITIONS = ("logicality", "correctness", "unfiltered")


NUMBER = re.compile(r"\b\d+\b")


def mask_numbers(sentence: str) -> str:
    """Every number of a sentence replaced by the word ``num``: the similarity of a step to a nexus
    then reads which law and which quantities it states, not whether its arithmetic is right (so
    that logicality is not correctness by another name)."""
    return NUMBER.sub("num", sentence)


class TfidfEncoder:
    """The offline stand-in for the paper's sentence encoder (all-MiniLM-L6-v2): TF-IDF over word
    1- and 2-grams (single characters count as words), L2-normalised, fitted on a reference corpus
    of sentences. With ``masked`` (the default) every number is read as the word ``num`` first
    (:func:`mask_numbers`); ``masked=False`` keeps the numbers as words (the first version of this
    chapter)."""

    def __init__(self, corpus: list[str], masked: bool = True):
        self.masked = masked
        self.vectorizer = TfidfVectorizer(token_pattern=r"(?u)\b\w+\b", ngram_range=(1, 2),
                                          stop_words=STOP_WORDS, lowercase=False, norm="l2",
                                          preprocessor=mask_numbers if masked else None)
        self.vectorizer.fit(corpus)

    def __call__(self, sentences: list[str]) -> np.ndarray:
        return self.vectorizer.transform(sentences).toarray()


def split_sentences(reasoning: str) -> list[str]:
    """Step 1: strip the reasoning, split it at ``[.!?]+`` followed by whitespace, strip the pieces
    and drop empty ones (a mark at the very end stays on its sentence)."""
    return [s.strip() for s in SENTENCE_SPLIT.split(reasoning.strip()) if s.strip()]


def similarity_matrix(nexus_vectors: np.ndarray, sentence_vectors: np.ndarray) -> np.ndarray:
    """Step 2: M_ij = cos(e(n_i), e(s_j)), shape (K, m); a zero vector has similarity 0."""
    a = nexus_vectors / np.maximum(np.linalg.norm(nexus_vectors, axis=1, keepdims=True), 1e-12)
    b = sentence_vectors / np.maximum(np.linalg.norm(sentence_vectors, axis=1, keepdims=True), 1e-12)
    return a @ b.T


def greedy_match(M: np.ndarray, tau: float = TAU) -> list[tuple[int, int]]:
    """Step 3: repeatedly take the largest remaining M_ij >= tau over unused rows and columns,
    record (i, j) and remove row i and column j; stop when no entry >= tau remains (greedy, not the
    optimal assignment)."""
    M = np.array(M, dtype=float)
    matches = []
    while M.size:
        i, j = np.unravel_index(np.argmax(M), M.shape)
        if not M[i, j] >= tau:
            break
        matches.append((int(i), int(j)))
        M[i, :] = -np.inf
        M[:, j] = -np.inf
    return matches


def fidelity(M: np.ndarray, matches: list[tuple[int, int]], weights: np.ndarray) -> tuple[float, float, float]:
    """Step 4, Logical Fidelity: Rec = sum_{(i,j) matched} w_i M_ij / sum_i w_i (weighted, similarity
    valued), Prec = |matches| / m (a count), F = 2 Prec Rec / (Prec + Rec) (0 if both are 0)."""
    weights = np.asarray(weights, dtype=float)
    rec = sum(weights[i] * M[i, j] for i, j in matches) / weights.sum()
    prec = len(matches) / M.shape[1]
    f = 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
    return float(rec), float(prec), float(f)


def centroids(M: np.ndarray) -> np.ndarray:
    """Step 5a: each nexus's positional centroid over the sentences, p_i = sum_j j M_ij / sum_j M_ij
    (j from 1, the raw similarities), 0 where the denominator is <= 0."""
    positions = np.arange(1, M.shape[1] + 1)
    total = M.sum(axis=1)
    safe = np.where(total > 0, total, 1.0)
    return np.where(total > 0, (M * positions).sum(axis=1) / safe, 0.0)


def causal_connection(pbar: np.ndarray, weights: np.ndarray) -> float:
    """Step 5b, Causal Connection: O = sum_{i<k} (w_i + w_k) 1[p_i < p_k] / sum_{i<k} (w_i + w_k),
    strict inequality; 0.5 when there are fewer than two nexuses."""
    K = len(pbar)
    if K < 2:
        return 0.5
    i, k = np.triu_indices(K, 1)
    pair_w = np.asarray(weights, dtype=float)[i] + np.asarray(weights, dtype=float)[k]
    return float((pair_w * (pbar[i] < pbar[k])).sum() / pair_w.sum())


def inferential_progress(M: np.ndarray) -> float:
    """Step 6, Inferential Progress: column j of M is the focus of sentence j; its novelty is
    nu_j = 1 - max(0, max_{k<j} cos(M_:j, M_:k)) (pairs with a zero column skipped), and
    P = mean of nu_j over j = 2..m; P = 1 when m <= 1."""
    m = M.shape[1]
    if m <= 1:
        return 1.0
    norms = np.linalg.norm(M, axis=0)
    novelty = []
    for j in range(1, m):
        sims = [M[:, j] @ M[:, k] / (norms[j] * norms[k]) for k in range(j) if norms[j] > 0 and norms[k] > 0]
        novelty.append(1.0 - max(0.0, max(sims)) if sims else 1.0)
    return float(np.mean(novelty))


def logicality(nexus_vectors: np.ndarray, weights: np.ndarray, sentence_vectors: np.ndarray,
               tau: float = TAU) -> dict:
    """Step 7: F, O, P (and Rec, Prec) of one trace from the encoded nexuses and sentences;
    all zero when the reasoning has no sentence."""
    if len(sentence_vectors) == 0:
        return {"F": 0.0, "O": 0.0, "P": 0.0, "Rec": 0.0, "Prec": 0.0}
    M = similarity_matrix(nexus_vectors, sentence_vectors)
    rec, prec, f = fidelity(M, greedy_match(M, tau), weights)
    return {"F": f, "O": causal_connection(centroids(M), weights), "P": inferential_progress(M),
            "Rec": rec, "Prec": prec}


def assess(encoder, nexus_texts: list[list[str]], weights: list[np.ndarray], reasonings: list[str],
           tau: float = TAU) -> list[dict]:
    """Steps 1-7 for many traces at once: ``reasonings[r]`` against the nexuses ``nexus_texts[r]``
    with weights ``weights[r]``. Every distinct sentence is encoded once (one encoder call)."""
    pieces = [split_sentences(text) for text in reasonings]
    distinct = sorted({s for group in nexus_texts for s in group} | {s for group in pieces for s in group})
    vectors = encoder(distinct) if distinct else np.zeros((0, 1))
    row = {s: k for k, s in enumerate(distinct)}
    width = vectors.shape[1]
    return [logicality(vectors[[row[s] for s in nexus]], w,
                       vectors[[row[s] for s in sentences]] if sentences else np.zeros((0, width)), tau)
            for nexus, w, sentences in zip(nexus_texts, weights, pieces)]


def logicality_score(scores: dict) -> float:
    """The selection score S = (F + O + P) / 3 (ours; the paper's combination is not stated)."""
    return (scores["F"] + scores["O"] + scores["P"]) / 3.0


def select_traces(correct: np.ndarray, score: np.ndarray, condition: str, rng: np.random.Generator) -> np.ndarray:
    """One candidate per problem from ``correct`` and ``score`` (problems x K candidates), the
    book's version of logicality-guided sampling: ``logicality`` takes the highest-S correct
    candidate (first on ties), ``correctness`` a uniformly random correct one (rejection sampling),
    ``unfiltered`` a uniformly random one. Problems without a correct candidate get -1."""
    n, K = correct.shape
    chosen = np.full(n, -1)
    for row in range(n):
        pool = np.flatnonzero(correct[row]) if condition != "unfiltered" else np.arange(K)
        if len(pool) == 0:
            continue
        if condition == "logicality":
            chosen[row] = pool[np.argmax(score[row, pool])]
        elif condition in ("correctness", "unfiltered"):
            chosen[row] = pool[rng.integers(len(pool))]
        else:
            raise ValueError(f"unknown condition {condition!r}; expected one of {CONDITIONS}")
    return chosen
