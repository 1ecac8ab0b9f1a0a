"""CA-SOADD, theory illustrations: cosine collapse and online standardisation, and the gradient
of the hinge against BCE on probes (numpy only)."""

from __future__ import annotations

import numpy as np

__all__ = ["cosine_spread", "hinge_and_bce_gradients"]


def cosine_spread(rng, offset: float, dim: int = 32, n: int = 2000, standardise: bool = False):
    """(std of s(z, c), ||c||) for z = mu + eps, eps ~ N(0, I), ||mu|| = ``offset``, and c the
    mean of the L2-normalised z (the M2 centroid). ``standardise`` first subtracts the sample mean
    and divides by the sample std (OS). For a large offset every cosine tends to 1 and the spread to
    0; after OS the spread is back but c shrinks to the origin (the pitfall to watch)."""
    mu = np.zeros(dim)
    mu[0] = offset
    z = mu + rng.standard_normal((n, dim))
    if standardise:
        z = (z - z.mean(0)) / np.sqrt(z.var(0) + 1e-5)
    c = (z / np.linalg.norm(z, axis=1, keepdims=True)).mean(0)
    s = z @ c / (np.linalg.norm(z, axis=1) * np.linalg.norm(c) + 1e-12)
    return float(s.std()), float(np.linalg.norm(c))


def hinge_and_bce_gradients(s_real: float, s_probe: np.ndarray, m: float = 1.0, b: float = 0.0,
                            temperature: float = 0.1):
    """d loss / d s_probe for the hinge max(0, m - s_real + s_probe) and for BCE on the probe
    (label 0, logit (s_probe - b) / temperature): the hinge is silent once s_probe <= s_real - m,
    BCE keeps pushing with weight sigmoid(logit) / temperature."""
    hinge = (m - s_real + s_probe > 0).astype(float)
    bce = 1 / (1 + np.exp(-(s_probe - b) / temperature)) / temperature
    return hinge, bce
