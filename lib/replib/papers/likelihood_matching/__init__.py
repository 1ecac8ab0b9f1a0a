"""LM (likelihood matching): training a diffusion model by the Gaussian quasi-likelihood of its reverse
transitions, learning the score and the Hessian of log p_t, at CPU scale.

Paper: Qian, Su, Huang, Chen, "Likelihood Matching for Diffusion Models" (ICML 2026, arXiv
2508.03636). Official code: none found. Only the abstract, summaries and reviews could be read (not
the method section, theorems, hyperparameters or tables), so the method is our reconstruction from
the abstract's definitions, in six sections that the modules cite by number (ours, not the paper's):
1 the forward process, 2 the likelihood along the reverse path, 3 the exact moments of a reverse
transition (second-order Tweedie), 4 the Gaussian quasi-likelihood and the LM objective, 5 the
low-rank Hessian parameterisation (the paper names a low-rank Hessian and Sherman-Morrison-Woodbury;
the exact form is ours), 6 the stochastic sampler. Items marked (derived) follow from the abstract's
definitions by exact, standard identities; items marked (proposed) are our choices where the readable
text states nothing.

Modules (torch for the network, float64 torch/numpy for the Gaussian algebra):

* ``method.py``: the method. Forward process (section 1): :func:`alpha_bar`, :func:`transition`,
  :func:`time_grid`, :func:`posterior_variance`. Second-order Tweedie (section 3):
  :func:`tweedie_moments`; the quasi-likelihood in its Rao-Blackwellised form (section 4):
  :func:`quasi_likelihood_rb` (dense C), :func:`smw_terms` (section 5, Sherman-Morrison-Woodbury),
  :func:`covariance_factors`. The network (section 5): :class:`LMNet` (shared trunk,
  heads eps/score, log-diagonal, low-rank factor) and :func:`hessian_from_model`; the losses
  :func:`training_loss` (LM, B3, B4, DSM). Reverse steps and samplers (section 6, baselines B1-B4):
  :func:`isotropic_reverse`, :func:`model_reverse_fn`, :func:`exact_reverse_fn`, :func:`sample`.
  The method names :data:`METHODS` (and the training objective of each).
* ``task.py``: the toy world. Toy data: the 2-D anisotropic Gaussian mixture (:func:`ring_mixture`,
  :func:`sample_mixture`) and its analytic marginals under the forward process
  (:func:`mixture_at`, :func:`log_pt`, :func:`score_pt`, :func:`hessian_pt`). Metrics:
  :func:`projection_directions`, :func:`sliced_w2`, :func:`sampling_floor` and :func:`corrected_sw2`
  (the distance corrected for the finite-sample floor), :func:`nll_bound` (section 2, DDPM-style KL
  sum), :func:`score_jacobian_hessian` and :func:`hessian_error`.
* ``theory.py``: theory helpers: :func:`path_identity_check`, :func:`tweedie_quadrature_1d`,
  :func:`gaussian_output_covariance`, :func:`reverse_kl_1d`, :func:`smw_check`.
* ``experiment.py``: :data:`METHOD_LABELS` (the row labels), :data:`ORACLES` (the exact samplers of
  the calibration), :data:`EXPERIMENT_PROFILES`, :func:`train_model` (one network per objective on
  the toy's data stream), :func:`oracle_reverse_fns`, :func:`distance_rows`, :func:`run_experiment`,
  :func:`claim_values`.
* ``exercises.py``: the graders :func:`check_tweedie_moments` and :func:`check_sliced_w2`.

Methods (one row label each): ``LM`` (L^RB objective trained with decoupled gradients, sampler of
section 6 with score and Hessian), ``B1`` (DSM epsilon-loss + DDPM ancestral sampler, reverse
variance beta_k := sigma_k^2), ``B2`` (the same DSM network, posterior variance beta-tilde_k), ``B3``
(LM mean only: C = I in loss and sampler), ``B4`` (LM with diagonal covariance, r = 0, decoupled
gradients), ``LMjoint`` (the same L^RB trained with its plain, coupled gradient: the recipe before the
revision of issue 17). B1 and B2 share one DSM-trained network per seed. LMjoint runs at the
paper profile only (the book profile's time budget); B4 runs in the book profile since issue 41, and
B3, S1 and S2 (LM's score with the DDPM variances beta_k, beta-tilde_k) use LM's own network (see the
two trunks below).

Fidelity notes and resolved ambiguities (ours unless marked):

* Schedule (proposed, section 1): VP with linear beta(t) from 0.1 to 20 on t in [0, 1],
  alpha_bar(t) = exp(-0.1 t - 9.95 t^2); alpha_bar(1) ~ 4.3e-5. The sampler's grid is uniform in t,
  t_k = k / N, k = 0..N.
* Training times: t ~ U(0, 1], Delta = 1/N with N drawn uniformly from the profile's
  ``n_steps_grid`` (the grid spacings used at test), s = max(t - Delta, 0) (proposed). All methods
  see the same stream of (x0, t, Delta, eps) for a given seed.
* Network: ``MLP([2 + 16, 64, 64, 64, 2 + 2 + 2 r], activation="silu")`` from
  :mod:`replib.models.mlp`, a 3 x 64 SiLU trunk (proposed), input x_t concatenated with a 16-d
  sinusoidal embedding of t (8 geometric frequencies 1..200 rad). (A first version used tanh, which
  saturates: eps_theta stayed bounded for far-out x and the sampler's 1/a expansion, up to
  1/sqrt(alpha_bar_1) ~ 150x, produced rare samples at |x| ~ 40 that dominated SW2. SiLU, like ReLU,
  grows linearly for large inputs.) The
  output layer's three slices are the heads. Rank r = 1: in 2-D every positive-definite 2 x 2 matrix
  is diag(positive) + a rank-1 term, so r = 1 loses nothing.
* Score head: epsilon parameterisation, s_theta = -eps_theta / sqrt(1 - alpha_bar_t), the same for
  DSM and LM (so the DSM loss is the usual ||eps_theta - eps||^2 and the LM score-matching term is
  sigma^2 / (1 - alpha_bar_t) (eps_theta - eps)^T C^{-1} (eps_theta - eps)).
* Covariance heads (section 5, proposed form Sigma_theta = diag(e^lambda) + L L^T for Cov[X0 | x_t]):
  we scale by the forward variance so the heads output O(1) numbers at every t:
  lambda = clamp(raw, -10, 5) + log(1 - alpha_bar_t), L = raw_L sqrt(1 - alpha_bar_t) (ours; the
  proposed clamp to [-10, 5] is applied to the raw head). D gets + 1e-5 (a proposed jitter).
* LM objective: the Rao-Blackwellised L^RB of section 4 (proposed), averaged over the batch with no
  time weighting; C = I for the first 10 % of steps (a proposed warm start), for every
  objective with a learned covariance.
* Training recipe (ours, declared in chapter.yml before it was measured): the loss value of L^RB,
  but the score receives the gradient of the identity-weighted term (B3's) and the covariance heads
  see the score residual held fixed (``lm_sg``; the stop-gradient of beta-NLL, Seitzer et al. 2022).
  The minimisers are unchanged; the C^{-1} coupling of the score's gradient, which made the jointly
  trained score about 4x worse than DSM's at t = 0.1, is removed. LMjoint keeps the coupled gradient.
* Optimiser: Adam, learning rate 0.004 (chosen from 0.001, 0.002, 0.004 by one protocol for DSM and
  LM, chapter.yml's tuning) with cosine decay to 0 over the run (ours); each trunk's gradient clipped
  to norm 1 separately (issue 41); fresh mixture samples every step (infinite data).
* Two trunks (issue 41): the score trunk and a covariance trunk of the same shape, so the covariance
  terms cannot reach the score's parameters (with one shared trunk they did, and tripled one seed's
  score error at t = 0.3). LM's score trunk then receives exactly B3's gradient: B3, S1 and S2 are
  LM's own score with the isotropic variances (no separate training), and B4 trains a second,
  diagonal covariance trunk on the same score in LM's loop.
* The score term's weight sigma^2_{t|s} / (1 - alpha_bar_t) is Rao-Blackwellised over the step Delta
  (its mean over the training step sizes at the sample's t, :func:`method.rb_score_weight`; issue 41):
  the same expected loss, without the per-sample spread (0.05-0.93 at t = 0.3).
* Samplers: every method draws from its own reverse Gaussian at every step, the last (s = 0)
  included; for B2 beta-tilde_1 = 0, so its last step is the deterministic mean (standard DDPM).
  B3's reverse variance is sigma_k^2 / a_k^2 I (section 3 with C = I), B1's sigma_k^2 I.
* NLL bound (section 2): KL(q(x_N|x_0) || N(0, I)) + sum_{k >= 2} KL(q(x_{k-1}|x_k, x_0) ||
  p_theta(x_{k-1}|x_k)) - log p_theta(x_0 | x_1), one forward draw of x_k per test point and k,
  divided by d (nats/dim, continuous data, no dequantisation, so it can be negative). Identical code
  for every method; only the reverse Gaussian differs. B2's decoder (k = 1) would have zero variance,
  so in the bound it uses beta_1 = sigma_1^2 (the DDPM decoder convention).
* Hessian error: H_theta = -I/(1 - alpha_bar) + alpha_bar/(1 - alpha_bar)^2 Sigma_theta at fresh x_t ~
  p_t; relative Frobenius error per point, averaged over points. B1/B3 have no trained Hessian (NaN).
* Outliers: SW2 is sensitive to a handful of far-out samples; a method whose network extrapolates
  badly shows it as a large SW2 (the metric is kept as declared; look at the scatter plots).
* B3's reverse variance sigma^2/a^2 is large for coarse steps (about 36 on the first step at N = 5),
  which is what C = I implies in section 3; its NLL and SW2 at small N reflect that.
* SW2: 64 unit directions from ``numpy.random.default_rng(12345)``; with equal sizes the 1-D W2 is the
  mean squared difference of sorted projections; SW2 = sqrt(mean over directions).
"""
