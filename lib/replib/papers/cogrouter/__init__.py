"""CogRouter at CPU scale: an agent that picks a thinking depth ("cognitive level") at every step,
trained with CoSFT then CoPO (cognition-aware policy optimisation), on the toy task DepthWorld.

Paper: "Think Fast and Slow: Step-Level Cognitive Depth Adaptation for LLM Agents" (ICML 2026,
arXiv 2602.12662; official code https://github.com/rhyang2021/CogRouter). Only the abstract and the
opening of the introduction could be read; the algorithm below follows the official code, in steps
1-9 numbered by us after what the code does (1 rollouts, 2 trajectory advantage, 3 choice of the
steps to expand, 4 level variants, 5 action confidences, 6 min-max normalisation, 7 weights,
8 reweighted batch, 9 clipped update), and every docstring names the step it implements. At each
step the agent answers ``<level>l</level><think>z_l</think><action>a</action>`` with l in
{1, 2, 3, 4}; CoPO gives every
step of a successful episode four "level variants" (same state and action, the thought of another
level) and reweights the episode's GRPO advantage by how confident each level makes the action:

    c_l = pi(a | s, l, z_l),   c_hat = minmax(c),   w_l = exp(k c_hat_l) / mean_l' exp(k c_hat_l'),
    A_{t,l} = w_l A_tau                                    (k = 2, steps 5-8).

Modules (torch for the policy, numpy for the task and the theory):

* :mod:`.method`: the paper's method, CoPO (steps 2-9), knowing nothing of DepthWorld:
  :data:`N_LEVELS`, :func:`pooled_group_advantages` (step 2), :func:`expansion_mask` (step 3),
  :func:`action_confidences` (step 5), :func:`copo_weights` (steps 5-7), :func:`build_batch`
  (steps 2-8), :func:`policy_update` (step 9).
* :mod:`.task`: DepthWorld (our toy task, in its noisy-thought design; :data:`VARIANTS` adds our
  "strong" variant for the exploratory sweep): :data:`N_STAGES`, :data:`MAX_STEPS`,
  :data:`N_ACTIONS`, :data:`TYPE_PROBS`, :data:`STAGE_TYPES`, :data:`LEVEL_COSTS`,
  :data:`SUFFICIENT_LEVEL`, :func:`obs_dim`, :func:`view_dim`, :func:`sample_tasks`,
  :func:`repeat_tasks`, :func:`observe`, :func:`memory_readout`, :func:`lookahead_readout`,
  :func:`thought_views`, :func:`new_state`, :func:`env_step`, :func:`episode_returns`; the agent
  sized to it, :class:`LevelPolicy` (level head pi(l | s) and action head pi(a | s, z_l, l), two
  :class:`replib.models.mlp.MLP`), :func:`make_policy`; CoSFT on DepthWorld stages,
  :func:`cosft_batch`, :func:`cosft`; rollouts (step 1), :func:`rollout`; evaluation,
  :func:`evaluate`; the headroom arm :class:`OracleRouter`.
* :mod:`.experiment`: one RL iteration on DepthWorld (steps 1-9), :func:`rl_iteration`; the premise
  check, :func:`premise`; the convergence rule, :func:`plateaued`; :data:`METHODS` (the baselines
  are a few lines each, inside :func:`train_method`), :data:`EXPERIMENT_PROFILES`,
  :func:`train_method`, :func:`start_seed`, :func:`run_method`, :func:`run_seed`,
  :func:`run_experiment`, :func:`claim_values`, :func:`method_settings`; the tuning protocol,
  :func:`tuning_grid`, :func:`select_cells`, :data:`TUNING_GRID`, :data:`TUNING_RESULTS`.
* :mod:`.theory`: the theory notebook's helpers (our analysis): :func:`weight_bounds`,
  :func:`level_fixed_point`, :func:`iterate_level_update`, :func:`grpo_vs_copo_credit_example`.
* :mod:`.exercises`: the graders :func:`check_copo_weights`, :func:`check_level_fixed_point`.

DepthWorld (our toy task in place of the paper's ALFWorld and ScienceWorld; all of it is our choice).

* An episode has ``N_STAGES`` = 10 stages and at most ``MAX_STEPS`` = 14 steps, 4 actions. Stage
  types are i.i.d. routine (0.6), recall (0.2), plan (0.2), except that stage 0 is always routine
  (ours: so that a cue exists before any recall). A routine stage shows an "arrow" (its correct
  action) and a fresh random cue; a recall stage's correct action is the *memory* cue, the cue of
  the most recent routine stage before it; a plan stage's correct action is a random action that
  only the level-4 lookahead reveals. A wrong routine action wastes a step (the stage repeats, same
  arrow and cue); a wrong recall/plan action ends the episode with reward 0; reward 1 iff the 10
  stages are passed within 14 steps.
* Observation s (the level head's input and level 1's thought), :func:`observe`, 11 numbers:
  ``[arrow one-hot (4), cue one-hot (4), is_recall, is_plan, stage / N_STAGES]``; arrow and cue
  are zeros at recall and plan stages. (Strong variant: 4 more numbers, see below.)
* Thoughts (:func:`thought_views`; our fixed feature modules in place of written reasoning):
  z_1 = the clean observation; z_2 = a noisy re-description (Gaussian noise sd 0.55 on the arrow
  and cue entries, the flags and stage index clean); z_3 = z_2's kind of re-description plus a
  memory read-out (memory-cue one-hot, zeros before any cue, + noise sd 0.3); z_4 = the same plus a
  lookahead read-out (one-hot of the plan answer at plan stages, zeros elsewhere, + noise sd 0.3).
  The "view" fed to the action head is ``[obs block (11), memory block (4), lookahead block (4)]``
  with absent blocks zero, so ``view_dim = obs_dim + 8``. Every level's thought gets its own noise,
  drawn fresh at every step; no thought ever sees the chosen action. Token costs C = (8, 40, 80,
  130) per step at levels 1-4 (our choice, roughly the lengths of the code's level templates).
* Why noisy re-descriptions: they build in the paper's premise that at routine steps extra
  reasoning can only lower the action's confidence (a pilot run of ours found that with clean
  thoughts level 1 was never the most confident level at routine steps). This tests CoPO's credit
  rule, not whether an LLM can learn to write useful reasoning (a limitation to state).
* Strong variant (``variant="strong"``, exploratory only): the observation gets a 4-entry
  "distances" block, at plan stages the true candidate distances d ~ U(0, 1)^4 plus noise sd 0.1
  (fixed per task), zeros elsewhere; the plan answer is argmin(d), so level 1 can learn it from the
  observation imperfectly while the lookahead reads out the clean argmin. Consequences are delayed:
  a wrong recall/plan action does not end the episode (the stage is passed) but multiplies the final
  success probability by 0.3 (the return is then Bernoulli(0.3^n_wrong) if all stages are passed
  in time). The numbers 0.1 and 0.3 are ours.

The agent. Level head pi(l | s) = ``MLP([obs_dim, 32, 4])``; action head pi(a | s, z_l, l) =
``MLP([4 + view_dim, 64, 4])`` on ``[level one-hot, view]``. A response's log-probability is
log pi(l | s) + log pi(a | view_l, l); fixed-level agents skip the level head (their response
log-prob is the action term only). A decoding temperature T divides both heads' logits.

Fidelity notes (the paper's numbers are from an LLM; the algorithm is the official code's, the rest ours):

* CoSFT (:func:`cosft`, our construction): supervised learning on freshly generated single
  stages, drawn as uniformly random stages of freshly sampled episodes (so memory cues and stage
  indices are as in real episodes). Level label = the minimal sufficient level (routine 1, recall 3,
  plan 4), replaced by a uniformly random level with probability 0.3; action label = the correct
  action, predicted from the view of the *labelled* level with fresh noise. Cross-entropy of both
  heads (summed), Adam lr 3e-3, batch 256. How the paper built its CoSFT data is unknown.
* Rollouts (step 1): B = 16 tasks x G = 4 episodes, temperature 1. A task fixes the stage types,
  arrows, cues and plan answers; its G episodes differ only in the agent's sampling and thought
  noise. Return R = 1[won] (the paper uses 10 * 1[won]; the scale cancels in the advantage).
  :func:`rollout` draws the thoughts of *all four* levels at every step and uses the chosen
  level's one; the others are never used for acting, so they are exactly the "fresh thoughts for the
  other levels" of step 4 (drawn earlier, which changes nothing in distribution).
* Advantage (step 2, :func:`pooled_group_advantages`): as in the code, pooled over the group's
  step-samples: every step of episode tau carries R_tau, and mean and *unbiased* std are taken over
  all the group's steps (long episodes weigh more); A = (R_tau - mean) / (std + 1e-6), A = 0 when
  the group's returns are all equal. (:func:`replib.rl.group_advantages` is per episode with the
  population std, hence our own small function.)
* Expansion (steps 3-8): only steps of successful episodes in mixed groups. The original sample is
  replaced by its four level variants (z_{l_orig} = the original thought, fresh thoughts for the
  others), each with advantage w_l A_tau. With single-token actions the geometric-mean confidence
  is pi(a | view_l, l); confidences use the current policy at temperature 1, under no_grad, before
  the update. The paper writes the other levels' thoughts *conditioned on the chosen action*
  (rationalisation); ours cannot see it (our choice: otherwise confidences saturate).
* Update (step 9, :func:`policy_update`): one Adam step (learning rate and KL weight per method
  from the declared tuning grid, see below; the paper's 5e-7 is for a 7B LLM) per iteration on the whole batch (the paper: mini-batches of 32, one PPO
  epoch). Loss = :func:`replib.rl.clipped_surrogate` (clip 0.2) on response log-probs + beta * mean
  :func:`replib.rl.kl_k3` (new vs reference; beta = 0.1 for ALFWorld in the paper's scripts) - 0.001 * entropy (the
  paper's entropy coefficient; entropy = level-head + action-head entropy at the sample's state),
  gradient norm clipped to 1. With one update on fresh samples the ratio is exactly 1
  (old log-probs = the current ones, detached): the surrogate's gradient is -mean(A grad log pi),
  and clipping never acts; it is kept to mirror the algorithm. The loss is averaged over *samples*
  (a response = the level token + the action token), not over tokens as verl's token-mean does;
  with two policy tokens per response this only rescales, and keeps fixed-level agents (one token)
  comparable. The KL reference is the frozen CoSFT policy (``grpo_scratch``: its own initial
  policy). The invalid-action penalty of verl-agent has no analogue (every action is valid).
* Methods (:data:`METHODS`): ``cosft`` (evaluated only; the null of every headline), ``oracle``
  (evaluated only: :class:`OracleRouter`, the headroom arm), ``copo``, ``grpo`` (the same update
  without the expansion: plain A_tau on the sampled responses; isolates the reweighting), two
  one-factor controls of CoPO (ours, claims c5 and c6): ``copo_sampled_level`` (the four variants
  train the action head only, the level head is trained on the sampled level with A_tau, as in
  GRPO) and ``copo_quarter`` (each variant's advantage w_l A_tau / 4: an expanded step weighs one
  sample, not four), ``fixed_l1`` and ``fixed_l4`` (level forced in rollouts and evaluation, GRPO
  on the action head only), ``grpo_scratch`` (adaptive GRPO from the random initial policy, no
  CoSFT). Tuning (:func:`tuning_grid`, :func:`select_cells`): the same grid of learning rate and KL
  weight for CoPO and GRPO on pilot seeds 10-12, each method at its best cell (:data:`TUNED`);
  the controls at CoPO's, the other GRPO-family baselines at GRPO's (:func:`method_settings`). Every RL method of a
  seed runs on the same task stream until the same convergence rule stops it (:func:`plateaued`:
  success on ``n_val`` fixed validation episodes at temperature 0.4, every ``eval_every``
  iterations; stop when the mean of the last ``plateau_window`` points is less than
  ``plateau_delta`` above the mean of the window before), at most ``iterations`` iterations. The
  rule (8 points of 25 iterations, half a point) was set on a pilot of the baselines alone.
* Evaluation (:func:`evaluate`): a fixed set of ``n_eval`` episodes per seed (not the validation
  ones), at temperatures 0.4 (the paper's) and 1.0, at iteration 0 and where the method stopped.
  Cost per step and mean levels are averaged over all steps taken (repeated routine steps
  included).
* Premise (:func:`premise`, claim 1): CoSFT policy, ``n_premise_episodes`` episodes at temperature
  1; at every step of a successful episode c_l for the four levels as in step 5; the argmax level.
* Streams and determinism: numpy generators seeded by (seed, purpose[, method]) for tasks, thought
  noise and sampling; the task stream depends on the seed only. Each (seed, method) run
  (:func:`run_method`) runs under :func:`replib.core.runtime.compute_threads` (one thread by
  default, deterministic algorithms), so a seed gives the same numbers on every run with the same
  thread count, whether the runs share one process or ``workers`` processes (spawned; stage 1,
  :func:`start_seed`, stays in the calling process).
* Claim conventions (:func:`claim_values`): final evaluation at temperature 0.4; the headlines
  are differences from CoSFT alone (their null); depth gaps pool the steps of recall and plan
  stages; p1 is the share of a seed's RL agents stopped by the rule before the cap; claims needing a
  missing method are nan.
* Profiles (:data:`EXPERIMENT_PROFILES`): ``smoke`` (1 seed, CoSFT 40 steps, at most 10
  iterations, every arm but fixed level 1; a few seconds), ``book`` (the confirmatory seeds
  1000-1004, CoSFT 400 steps, every arm but fixed level 1 (in no claim) to the convergence rule, at
  most 1500 iterations, 300 validation and 300 evaluation episodes, 2 worker processes), ``paper``
  (seeds 1000-1009, every method, at most 4000 iterations, 1000 episodes each, and the tuning grid
  rerun on the pilot seeds). One thread per process: two are not faster for these MLPs.
"""
