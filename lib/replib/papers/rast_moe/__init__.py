"""RAST-MoE-RL at CPU scale: PPO with zone-wise hold/release decisions for delayed matching in ride
hailing, with a Transformer encoder whose last block is a sparse mixture of experts routed once per
state, and a reward whose service-violation penalty is an online Lagrange multiplier.

Paper: "RAST-MoE-RL: A Regime-Aware Spatio-Temporal MoE Framework for Deep Reinforcement Learning in
Ride-Hailing" (Tang, Cui, Park, Zhao, Jiang, He, Zhuang, Wang, Yu, Koutsopoulos, Zhao; ICML 2026,
arXiv 2512.13727). Sources: only the abstracts (arXiv v1 and the ICML version) and the public
reviews of an earlier version (OpenReview xQRAo9YUQ3) could be read; no official code was found. The
chapter reconstructs the method from them and proposes concrete forms for what they leave open; each
docstring says which parts are stated (abstracts, reviews), proposed (our concrete form of a stated
idea) or ours (not stated at all).

Modules:

* :mod:`.method`: the paper's method, knowing nothing of the city: the factorised policy (Eq. 1,
  :func:`~.method.factorised_log_prob`, :func:`~.method.zone_log_probs`,
  :func:`~.method.factorised_entropy`), the pooled top-k router (Eq. 2, :func:`~.method.route`), the
  sparse MoE block (Eq. 3, :class:`~.method.SparseMoE`), the load-balancing loss (Eq. 4,
  :func:`~.method.load_balancing_loss`), the encoder and actor-critic heads
  (:class:`~.method.RastEncoder`; ``n_experts = 0`` is the dense Transformer baseline), the adaptive
  reward (Eq. 5, :func:`~.method.shaped_reward`) and its multiplier (Eq. 6,
  :func:`~.method.update_lambda`), PPO (Eq. 7: :func:`~.method.gae`, :func:`~.method.ppo_loss`,
  :func:`~.method.collect_rollouts`, :func:`~.method.ppo_update`, :func:`~.method.train_ppo`,
  :class:`~.method.PPOConfig`).
* :mod:`.task`: the grid city (our design and sizes): regimes and the day's schedule,
  Poisson demand with hotspots, the density-speed congestion surrogate, batched Hungarian matching of
  the released zones (:func:`~.task.match_released`), abandonment after 600 s, the state features,
  the evaluation reward and metrics, and the heuristic policies (fixed release intervals, threshold
  rule).
* :mod:`.baselines`: the MLP encoder (prior work's shallow encoder) on the shared
  :class:`replib.models.mlp.MLP`.
* :mod:`.experiment`: profiles and bounds, the four PPO agents (MLP, Transformer, MoE with the
  adaptive reward; MoE with the fixed 1:8 weighting), evaluation on held-out days of the training
  regimes and of an unseen regime, the expert-masking ablation, :func:`~.experiment.claim_values`.
* :mod:`.theory`: the theory notebook's helpers (batching effect of holding, flow of the
  density-speed relation, MoE parameter counts, dual ascent on a constrained bandit).
* :mod:`.exercises`: the graders :func:`~.exercises.check_topk_gates`,
  :func:`~.exercises.check_load_balancing_loss`.

Fidelity notes (what differs from the paper, or is not known):

* No real data: a synthetic 4 x 4 km grid, 40 vehicles, days of 96 epochs of 30 s in four regimes
  (off-peak, central peak, off-peak, corner peak) instead of San Francisco's 2019 TNC traces; peak
  trips end within 1 km of their origin. The unseen regime scales demand by 1.3 and puts both peaks
  on the bottom edge. The state has no clock feature.
* Congestion from the instantaneous busy fraction (Greenshields-style, v_f = 28.8 km/h,
  rho_j = 1.5) instead of an hourly MFD-consistent OD table.
* Credit (ours): every zone's decision is credited with the city-wide reward (so a zone that takes
  its neighbours' vehicles pays for it), and only zones with waiting requests enter the policy loss.
* Evaluation (ours): learned policies are evaluated with sampled actions, as trained; a
  regime-switching oracle (the best pair of fixed intervals, off-peak and peak, reading the regime
  label) is the headroom arm.
* Reward (proposed/ours): r = -(w_m DT N_held + w_p pickup) / 600 s - lambda n_abandoned per zone;
  lambda starts at 1 and moves by eta = 10 times (violation rate - 0.05) after each PPO iteration;
  the evaluation reward charges 600 s per abandoned request. None of this is stated in the paper.
* Sizes: 8 experts, top 2, d = 32, about 47k parameters (book) against the paper's 16 experts,
  top 4, 12M parameters (the paper profile uses 16 / 4 at the same width).
"""
