"""SGB-IB, the baselines: point-level multi-view sIB (every sample its own ball, no structure
term, the same optimiser, restarts and stopping rule), K-means and spectral clustering on the
concatenated standardised views."""

from __future__ import annotations

from time import perf_counter

import numpy as np
from sklearn.cluster import KMeans, SpectralClustering
from sklearn.preprocessing import StandardScaler

from .method import conditional_distributions, ib_restarts_many, one_openmp_thread

__all__ = ["point_sib", "kmeans_concat", "spectral_concat", "standardised_concat"]


def point_sib(views, K, seed, beta_inv=0.01, restarts=5, max_sweeps=30) -> dict:
    """Point-level multi-view sIB: the IB phase of :func:`~.method.sgb_ib` with every sample a ball
    of weight 1/n and lambda = 0 (its restarts stepped together, as for the balls). Returns labels, F,
    sweeps, the sweeps of every restart and the IB phase's wall seconds."""
    Ps = [conditional_distributions(X) for X in views]
    n = len(Ps[0])
    t0 = perf_counter()
    run = ib_restarts_many([(np.full(n, 1.0 / n), Ps, np.concatenate(Ps, axis=1), None, seed)], K, restarts,
                           beta_inv, 0.0, max_sweeps)[0]
    return dict(labels=run["T"], F=run["F"], sweeps=int(run["sweeps"].sum()), restart_sweeps=run["sweeps"],
                t_ib=perf_counter() - t0)


def standardised_concat(views) -> np.ndarray:
    """Each view standardised column by column (constant columns left at 0), then concatenated."""
    return np.concatenate([StandardScaler().fit_transform(X) for X in views], axis=1)


def kmeans_concat(views, K, seed, n_init=10) -> np.ndarray:
    """K-means (``n_init`` restarts, random_state seed) on the concatenated standardised views."""
    with one_openmp_thread():
        return KMeans(K, n_init=n_init, random_state=seed).fit_predict(standardised_concat(views))


def spectral_concat(views, K, seed, n_neighbors=10) -> np.ndarray:
    """Spectral clustering on a symmetrised k-nearest-neighbour graph of the concatenated
    standardised views (scikit-learn's SpectralClustering, random_state seed)."""
    model = SpectralClustering(K, affinity="nearest_neighbors", n_neighbors=n_neighbors, random_state=seed,
                               assign_labels="kmeans")
    with one_openmp_thread():
        return model.fit_predict(standardised_concat(views))
