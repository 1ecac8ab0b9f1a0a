"""PrefixRL: on-policy RL on hard problems, started from prefixes of correct off-policy traces, at
CPU scale.

Paper: Setlur, Wang, Cohen, Rashidinejad, Xie, "Reuse your FLOPs: Scaling RL on Hard Problems by
Conditioning on Very Off-Policy Prefixes" (ICML 2026, arXiv 2601.18795). No official code; only the
abstract and third-party summaries could be read. The loop: take a correct trace y^x of problem x,
build the prefixed problem x + y^x_{1:h}, run on-policy RL on the *completion only* (the prefix is
part of the prompt: no gradient on it, no importance weights), evaluate on the unprefixed problems.
Objective (book notation)

    J_pre(pi) = E_x E_{h ~ rho} E_{y' ~ pi(. | x, y^x_{1:h})} r(x, y^x_{1:h} + y').

Device: at the paper profile the models run on `core.model_device` (a GPU when present); smoke and
book run on the CPU.

Modules (torch for the model, numpy for the theory):

* :mod:`.method`: PrefixRL's own pieces: the prefix length of each RL step (``draw_prefix_len``:
  h ~ U{floor(L/2), ..., L-2} for PrefixRL, h = 0 for GRPO and SFT-then-RL) and the on-policy update
  on the completion only (``rl_step``: group advantages and the policy-gradient loss of
  :mod:`replib.rl`, one optimiser step), which receives the task's rollout function from its caller.
* :mod:`.task`: the chain task (our toy, "modular chains" with a learnable step rule, see the
  fidelity notes): ``BOS``, ``SEP``, ``VOCAB``, ``PROMPT_LEN``, ``N_PROBLEMS``, ``STEP_TABLE``,
  ``NO_EOS``, ``step_rule``, ``all_problems``, ``split_problems``, ``correct_traces``,
  ``noisy_traces``, ``prompts``, ``sequences``, ``noise_floor``; the base model ``train_base`` (the
  shared tiny GPT-2 of :mod:`replib.models.causal_lm`, trained on noisy traces); exact evaluation
  (no sampling noise): ``correct_step_probs``, ``pass_at_1``, ``step_accuracy``, ``prefix_curve``,
  ``trace_cost_tokens``; rejection sampling the base model for traces (``rejection_sample``); the
  prefixed problems x + y^x_{1:h} (``prefixed_prompts``) and the rollouts with their rewards
  (``rollouts``).
* :mod:`.baselines`: the importance-weighted off-policy baseline (``truncated_importance_weights``,
  ``iw_offpolicy_step``: GRPO groups of G - 1 rollouts plus the correct trace, the trace's tokens
  weighted by min(pi_theta / mu, clip)).
* :mod:`.experiment`: ``METHODS``, ``TRACE_METHODS``, ``sft`` (imitation of the correct traces, the
  SFT-then-RL baseline), ``train_method`` (the RL loop of PrefixRL, standard GRPO, SFT-then-RL and
  the importance-weighted baseline: the baselines the abstract implies), ``EXPERIMENT_PROFILES``,
  ``moderate_cfg``, ``run_seed``, ``run_experiment``, ``claim_values``.
* :mod:`.theory`: the theory notebook's "combination lock": ``group_signal_probability``,
  ``lock_success``, ``softmax_pg_lock``, ``tree_consistency``, ``prefix_only_pg``,
  ``back_generalization_check``, ``consistency_check``.
* :mod:`.exercises`: the exercise graders ``check_group_advantages`` and
  ``check_group_signal_probability``.

(GRPO is PrefixRL with h = 0, and SFT-then-RL adds the few lines of ``experiment.sft``; only the
importance-weighted baseline has its own module.)

Conventions. A problem is x = (v0, d0, d1), three digits; there are exactly 1000. The correct
response is y_t = f(y_{t-1}, d_{t mod 2}) for t = 1..L with y_0 = v0 (so y_1 uses d1, y_2 uses d0,
...), where f is a fixed operation table on the digits (:data:`STEP_TABLE`). Token ids: digits 0-9 are ids 0-9, ``BOS`` = 10, ``SEP`` = 11. A sequence is
``[BOS, v0, d0, d1, SEP, y_1 .. y_L]`` (prompt length 5, no end token: every response has exactly L
tokens). Reward 1 iff all L response tokens are correct (a non-digit token is simply wrong).
Positions t are 1-based in the text and in the data frames (``position`` 1..L), 0-based in arrays.

Fidelity notes (the paper's RL algorithm, prefix schedule, models and data are unknown; everything
below is our choice):

* The step rule. Our first plan was f(a, d) = (a + d) mod 10. Before any claim was measured, the
  base model could not learn it: the tiny GPT-2 stayed at exactly ln 10 nats per step (uniform
  guessing) for 2,500 steps, at larger width and learning rate too, and at ln 5 even without noise.
  Modular addition is a parity-like target: given either operand alone the next digit is uniform,
  so gradient descent sees no partial signal and sits on a long plateau. We use instead a fixed
  random operation table (``STEP_TABLE``, drawn once from seed 2026), which keeps what the chapter
  needs (one per-step rule shared by all positions, exactly one correct trace per problem,
  per-step accuracy set by the noise) and is learnable: 600 steps at lr 3e-3 reach 0.007 nats
  above the noise floor with per-step accuracy about 0.6, 400 steps at lr 5e-3 (the book profile since
  the revision of 2026-12-02, to fit both regimes in the budget) reach 0.01 to 0.02 nats.
* RL budget. The book profile runs 50 RL steps per method and regime, evaluated every 10 (100 steps
  every 20 until issue 18 halved them to fit the notebook's time limit; the paper profile runs 300).
  The pretraining stream is stored as a ``datasets.Dataset`` and read back in one piece
  (``task._stored_batches``), not row by row, which had taken about half of the base model's time.

* Two strategies (revision of issue 43). Each problem has two correct responses: a strategy mark
  (token 12 for A, 13 for B, ``MARKS``) followed by L - 1 digits of the chain from y_0 = v0 (A) or
  y_0 = d0 (B), the same step rule y_t = f(y_{t-1}, d_{t mod 2}) after that; the verifier accepts
  either (:func:`.task.rollouts`), and exact pass@1 sums the two traces' probabilities
  (:func:`.task.pass_from_probs`). The base model is pretrained on a share ``q_other`` = 0.1 of
  strategy-B chains, so it writes the mark of B about one time in ten. (A first attempt without a
  mark, B reading the digits in the other order, left the 2-layer model unable to tell the
  strategies apart in 600 steps: 0.10 to 0.22 nats above the noise floor.)
* Two regimes share one base model per seed (pretrained on chains of L tokens). *Starved* (L = 20,
  base pass@1 about 5e-5): the off-policy traces are *oracle* strategy-A traces (the generator
  program); their cost is reported analytically, as if found by rejection sampling the base model:
  L / p_x expected sampled tokens for problem x with exact pass@1 p_x (:func:`.task.trace_cost_tokens`),
  not charged. *Two strategies* (``moderate_L`` = 10, base pass@1 about 9e-3, ``moderate_rl_steps``
  = 100 RL steps): the traces are strategy-B traces of another model family, a B generator whose
  digits err with probability ``eps_other`` = 0.25, found by rejection sampling it, at most
  ``rs_samples`` = 256 samples per training problem (simulated exactly: geometric with p = 0.75^9);
  only the problems with a trace are trained on, and the sampled tokens are charged to every method
  that uses the traces. A 10-token chain is the first 10 tokens of a 20-token one, so the base model
  knows these positions.
* Compute (:func:`.experiment.compute_units`): forward-token equivalents, FLOPs / 2N: a sampled
  token costs 1, a token of an update (forward and backward, RL or SFT) ``TRAIN_COST`` = 3.
  Rejection sampling, SFT epochs (epochs x traces x (5 + L) tokens), RL rollouts and RL updates are
  charged the same way to every arm.
* The importance-weighted baseline (:func:`.baselines.iw_offpolicy_step`, our form of the abstract's
  off-policy baselines, LUFFY-style mixed groups): each group holds G - 1 on-policy rollouts and the
  problem's correct trace; the trace's tokens carry per-token importance weights pi_theta / mu
  truncated at ``iw_clip`` = 1 (V-trace's rho-bar), mu = the policy that produced the trace (the
  other family: 1 for the mark, 1 - eps_other per digit). The paper's own off-policy baselines were
  not available.
* The base model is the tiny GPT-2 pretrained on noisy traces of all 1000 problems (each step
  replaced by a uniformly random other digit with probability eps, later steps continuing from the
  corrupted value), so its ideal conditional is p(correct next | history) = 1 - eps and its pass@1
  about (1 - eps)^L. The loss is on response tokens only. The GPT-2 config's pad/eos ids (SEP/BOS)
  are never used: training and scoring need neither, and :func:`.task.rollouts` calls the sampler with
  ``eos_id=-1`` (no token equals it), so every completion has exactly L - h tokens.
* RL update: one on-policy Adam step per batch (lr ``rl_lr``, no schedule, no KL, no clipping:
  with a single update on fresh samples the clipped surrogate has the REINFORCE gradient), loss
  -mean(A * log pi(completion | prefixed prompt)) over the B*G sequences, A the group-relative
  advantage. Adam is stepped even when every advantage is 0 (standard practice); with no earlier
  signal this leaves the weights unchanged, after signal Adam's momentum still moves them.
* PrefixRL draws one h ~ U{floor(L/2), ..., L-2} per step (our choice; the paper does not state it)
  and trains on prefixed problems only (no unprefixed problems mixed in: the back-generalization
  setting). GRPO uses h = 0. SFT-then-RL first runs ``sft_epochs`` full-batch steps of
  :func:`replib.models.causal_lm.train_lm` (AdamW, warmup 1, cosine decay) on the correct traces of
  all training problems, then the same GRPO. We first planned 20 steps at lr 1e-3; that leaves SFT
  far from converged (per-step accuracy 0.78 on the traces it imitates), so after the first book run
  we train it to convergence instead: 100 steps at lr 3e-3 (trace loss 0.02, per-step accuracy 0.97
  on held-out problems; chosen from SFT's own loss and accuracy). Since the revision of 2026-12-02
  SFT-then-RL runs in the moderate regime only; since issue 43 on the strategy-B traces, 100 epochs at
  lr 1e-2 (the fewest of {20, 50, 100} that fit the traces to p2's 0.95 on the pilot seeds).
* Learning rates: ``rl_lr`` (PrefixRL, GRPO), ``sft_rl_lr``, ``iw_lr``, each the best of the same
  grid {1e-3, 3e-3} on pilot seeds 0-2 (chapter.yml, tuning).
* Streams: every method of a seed starts from a deep copy of the same base model and sees the same
  problem stream (B distinct training problems per step, numpy generator seeded by the seed only);
  the rollout sampler (torch generator) and PrefixRL's h stream are seeded per (seed, method).
  Each seed uses its own train/held-out split (:func:`.task.split_problems` with the seed).
* Evaluation is exact: with two correct responses, pass@1 = sum_s prod_t p(y^s_t | x, y^s_<t) under
  teacher forcing (two forward passes), averaged over problems. Evaluations at step 0, every
  ``eval_every`` steps and at the end; "tokens" counts the completion tokens sampled during RL,
  "compute" everything charged so far.
* Threads: :func:`.experiment.run_seed` runs on one thread with torch's deterministic algorithms
  (:func:`replib.core.runtime.compute_threads`), so a seed gives the same numbers on every run;
  :func:`.experiment.run_experiment` runs the seeds on ``workers`` processes (2 at the book profile).
* Claim conventions (:func:`.experiment.claim_values`, :func:`.experiment.moderate_comparison`): m1
  compares held-out pass@1 at the common compute budget (the lower of the two runs' totals; each arm's
  last evaluation within it, the base model's pass@1 for an arm with no model yet), nan when
  SFT-then-RL's is 0; h1 = 1 / SFT-then-RL's pass@1 there (m1's ceiling); m2 compares compute at the
  first evaluation that reaches half of the lower of the two final training rewards, so SFT-then-RL
  already there at step 0 is charged the rejection sampling and SFT; h2 = SFT-then-RL's compute to
  the level over PrefixRL's compute at its first evaluation (m2's ceiling);
  the premise c1b is exact (from the base model's pass@1), not from a GRPO run; claims needing a
  method missing from ``methods`` / ``moderate_methods`` are nan.
"""
