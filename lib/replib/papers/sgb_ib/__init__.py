"""SGB-IB: structure-aware granular-ball information bottleneck for multi-modal clustering, at
CPU scale.

Paper: "SGB-IB: Structure-aware Granular-Ball based Information Bottleneck for Multi-modal
Clustering" (ICML 2026 poster; authors not shown on the accessible page; no arXiv version and no
official code found). Only the abstract could be read.

Modules:

* ``method.py``: the IB representation :func:`conditional_distributions`, the per-ball mutual
  informations :func:`ball_mi_terms` and the MI impurity :func:`impurity` (our reading B of the
  abstract's MI purity), the split step :func:`two_means`, ball generation :func:`generate_balls`
  (the literal rule, split while impure; ``accept=True`` adds our first plan's purity-gain test),
  the ball statistics :func:`ball_statistics`, the ball graph :func:`structure_graph`, the
  structure-aware IB functional :func:`ib_objective`, the draw-and-merge cost :func:`merge_costs`,
  the optimiser :func:`draw_and_merge` (several runs stepped together by
  :func:`draw_and_merge_batch`) with restarts :func:`ib_restarts` / :func:`ib_restarts_many`, the
  K-means pseudo-labels :func:`pseudo_labels` and the whole pipeline :func:`sgb_ib`.
* ``task.py``: Digits-3view (pixels, projection profiles, orientation histograms of scikit-learn's
  digits), its noisy-modality copy :func:`corrupt_views`, ACC with Hungarian matching, NMI, and the
  ball-majority ceiling :func:`majority_purity`.
* ``baselines.py``: point-level multi-view sIB (same optimiser and budget), K-means and spectral
  clustering on the concatenated standardised views.
* ``experiment.py``: profiles, :func:`run_experiment` (clean and noisy data, the ball oracle and the
  objective diagnosis), the theta sweep and :func:`claim_values`.
* ``exercises.py``: the exercise graders.

Fidelity: the abstract fixes five points (start from one ball; split recursively by purity; purity =
the modality-averaged MI between features and K-means pseudo-labels; a structure-aware objective for
local structure and global redundancy; an IB clustering). The purity ratio, the split step, the
objective's form (relevance - beta^-1 H(T) + lambda Omega), the draw-and-merge optimiser, the noise
model and every hyperparameter (theta = 0.9, n_min = 8, beta^-1 = 0.01, lambda = 0.05) are our
proposals (the paper's text could not be read); the rest of our first plan (a synthetic bag-of-words
set and purity reading A, a label-consistency purity) is left out.
numpy and scikit-learn only.
"""
