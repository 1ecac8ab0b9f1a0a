"""ReAugment at CPU scale: targeted few-shot time-series augmentation by a model zoo, a variational
masked autoencoder (VMAE) and REINFORCE, on three short real series.

Paper: "ReAugment: Model Zoo-Guided RL for Few-Shot Time Series Augmentation and Forecasting"
(ICML 2026, arXiv 2409.06282; earlier versions "Learning Augmentation Policies from A Model Zoo for
Time Series Forecasting" (AutoTSAug) and "Automated Data Augmentation for Few-Shot Time Series
Forecasting"). No official code was found. Only the abstracts, the opening of the introduction,
independent summaries and the public ICLR reviews of the first version could be read; every
docstring names the stage and step it implements, and says "(proposed)" where the form is our
reconstruction (the paper's formula could not be read).

The method in four stages, a window being w = [x; y] (look-back L = 36, horizon H = 12):

    0. K-fold zoo f_1..f_K;  v_i = Var_k ||f_k(x_i) - y_i||^2;  anchors A = top 50% of v;
    A. VMAE: posterior q(z | w), prior p(z | w_vis, m), decoder (z, w_vis, m) -> w_hat;
       loss = mean_t (w_hat - w)^2 + beta KL(q || p) / T;
    B. REINFORCE on the prior (the policy): r = s log(Var_k e_k(w_tilde) + eps) - lam ||w_tilde - w||^2 / d0
       (proposed; s = +1 the later versions, -1 the first), A = (r - mean r) / std r,
       loss = -mean(A log pi(z | w_vis, m));
    C. retrain the forecaster on D plus k generated windows per anchor, each weighted w in the loss
       (k and w tuned on a validation slice, the same grid for every augmenter).

Modules:

* :mod:`.method`: stages 0, A and B, knowing nothing of the data: :func:`kfold_assignment`,
  :func:`zoo_errors`, :func:`zoo_variance`, :func:`select_anchors`, :func:`fold_gap`;
  :func:`contiguous_mask`, :func:`gaussian_kl`, :class:`VMAE` (three :class:`replib.models.mlp.MLP`),
  :func:`vmae_loss`, :func:`train_vmae`, :func:`generate`; :func:`anchor_distance`,
  :func:`zoo_reward`, :func:`reinforce_step` (``replib.rl.group_advantages`` and
  ``replib.rl.policy_gradient_loss``), :func:`rl_finetune`.
* :mod:`.task`: the series (statsmodels' ``elnino``, ``sunspots`` and ``co2``; their values are
  stored in the module, as statsmodels is not a dependency of the book), :func:`make_windows`,
  :func:`windows_dataset` (a ``datasets.Dataset`` through ``replib.core.cached_dataset``), the
  forecaster :class:`ForecasterBank` (M MLPs trained at once, each as the shared MLP would be),
  :func:`fit_forecasters`, :func:`forecast_mse`, and the base model's weight decay per series
  (:data:`WEIGHT_DECAY`, the most over-fitting regime in which the forecaster still learns, set by a
  declared rule on a pilot of the forecaster alone).
* :mod:`.baselines`: :func:`jitter`, :func:`lookback_mean_forecast`, :func:`seasonal_naive_forecast`.
* :mod:`.experiment`: :data:`METHODS` (none, 60 more real windows, jitter, VMAE without RL,
  ReAugment, random anchors, the first version's reward sign), :data:`TUNED_ARMS`,
  :data:`EXPERIMENT_PROFILES` (with each augmenter's chosen grid point), :data:`EXPERIMENT_BOUNDS`,
  :func:`chosen_point`, :func:`augmented_sets`, :func:`run_dataset`, :func:`run_seed`,
  :func:`run_experiment`, :func:`judged_mse`, :func:`claim_values`.
* :mod:`.theory`: the theory notebook's toys: :func:`polynomial_zoo`, :func:`gradient_estimates`,
  :func:`toy_zoo_variance`, :func:`shaped_reward`, :func:`reinforce_gaussian`.
* :mod:`.exercises`: the graders :func:`check_fold_gap`, :func:`check_gaussian_kl`.

Fidelity notes. Not stated in what could be read, so our choice: K = 5; the anchors as a fraction
(top 50%) rather than a threshold; the reward's formula (the first version steered toward *lower*
zoo variance, the later ones toward overfit-prone regions under a proximity constraint: this package
does the latter, in a bounded log form, since an unbounded variance reward made the generator of our
planning pilot run away, and runs the former as an ablation); the VMAE's mask (one contiguous 25%
span), sizes (latent 8, hidden 64), loss weights (beta = 0.1, per-step scaling) and the prior's
log-variance clamp [-6, 2]; only the prior network is updated in stage B (the decoder fixed); the
zoo is not retrained during stage B; the number of generated windows per anchor and their weight in
the loss (tuned, the same grid for every augmenter). The forecaster is an MLP, not the paper's
Transformers, trained with the weight decay of :data:`task.WEIGHT_DECAY` (0.03 on El Nino and
sunspots, none on co2).
"""
