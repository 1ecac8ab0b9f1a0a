"""OLP-Router: bid-price (online linear programming) routing for LLM serving, at CPU scale.

Paper: Chen, Ye, Zhou, "Online Linear Programming for Multi-Objective Routing in LLM Serving"
(ICML 2026, arXiv 2607.03948). Official code: github.com/qqwetidx/Online-Linear-Programming-for-Vidur,
file ``vidur/scheduler/global_scheduler/online_lp_global_scheduler.py`` (policy ``dual_ahd``).

Modules:

* ``method.py``: the LP pieces, each a small function beside its equation: :func:`action_column`
  (the time-indexed column: a batch step and a KV ramp), :func:`slo_reward` (the SLO-weighted
  reward r), :func:`column_cost` (a^T p via prefix sums), :func:`remaining_capacity` (the
  right-hand side d), :func:`dual_update` (K projected subgradient steps on the SAA dual f(p)),
  :class:`Reservations` (committed U^B, U^M and the hard feasibility check),
  :func:`admit_by_margin` (steps 5-6 of the per-epoch algorithm), the router's hyperparameters
  :class:`OLPConfig`, and the single-resource dual step :func:`knapsack_price_step` of the theory.
* ``task.py``: the toy world. Workload (Poisson arrivals, optionally with a mid-window rate
  shift, log-normal prompt / decode lengths, exact or noisy predictions); a time-stepped cluster
  simulator shared by every policy (:class:`ClusterSim`), which holds the heuristics (Round
  Robin, Random, LOR, Power-of-two) that dispatch on arrival, the central-buffer ablations (FCFS,
  shortest-predicted-job-first) and the OLP bid-price router's scheduling epoch (steps 2-7,
  assembled from ``method``);
  :func:`run_policy` and :func:`metrics` (latencies, TTFT, and throughput within the arrival
  window as the official code's window experiments count it).
* ``theory.py``: theory illustration: single-resource online knapsack (offline LP, bid price with
  the offline dual, one-pass projected-SGD dual, first-come greedy).
* ``experiment.py``: experiment profiles (three loads around the measured capacity, a rate
  shift, an overload for the capacity measurement), the variants (heuristics, price-free central
  routers, an unbounded cluster as the ceiling of every latency and throughput claim, the router's
  weight settings), :func:`run_experiment` (every variant on every seed, seeds spread over
  processes), :func:`column_price` and :func:`claim_values` (the metrics of ``chapter.yml``).
* ``exercises.py``: the exercise graders.

All numpy only.

Conventions. Steps are 1-based, ``k = 1..T``; arrays over the horizon are 0-based, so step ``k``
lives at index ``k - 1``. A request admitted at step ``tau`` emits its first token in step ``tau``
and its ``o``-th (last) token in step ``tau + o - 1``; TTFT = first-token step - arrival step,
E2E = completion step - arrival step + 1 (both in steps).

Fidelity notes (where the paper and the official code leave room, the reading closest to the code is used):

* Epoch trigger: the code runs a scheduling epoch at every arrival and at every *batch end* of
  any replica while requests wait. In Vidur a batch is one model iteration, i.e. one step of this
  simulator, so the default ``trigger="batch_end"`` runs an epoch in every step in which the buffer
  is non-empty (and a worker ran or a request arrived; we also fire when every worker is idle so
  that the buffer cannot stall, which the event-driven code never needs). ``trigger="events"`` is
  the sparser reading "arrivals and request completions" (with the same idle guard).
* Reward normaliser: ``R_bar = T`` (our choice; the code default 1 makes almost every reward
  cap at 1); the tail weight's positive control uses ``R_bar = 2T``.
* Speed, not a change of method: the dual update gathers each minibatch's column entries once per
  step, and the epoch updates the prices only up to the end of the last recorded column (past it
  they are zero and stay zero, so the prices equal a whole-horizon update; a test checks it).
* Predictions: columns are scored and reserved with the predicted length ``o_hat`` (the paper);
  the code uses the true length. When ``o_hat != o`` the unused part of a reservation is released
  at completion and an overrunning request's reservation is extended step by step (our
  choice, not stated in the paper or code).
* History H: like the code, a request's column is recorded the first time it is scored, on its
  best worker ``argmax_g m_jg``; when no worker is feasible numpy's argmax returns worker 0 and that
  column is recorded anyway (as in the code).
* Price halving: the code halves prices when no (request, worker) pair passes the margin threshold;
  since the best candidate is always feasible this is the same as "nothing admitted".
* Preempted requests of the central policies (possible only with noisy predictions, when
  extended reservations overflow) release their remaining reservation and go back to the head of
  the router's buffer, to be re-scored (TTFT keeps the first token). The committed U^B, U^M
  then always equal the batch slots and KV tokens actually in use, so a router-admitted request
  always starts in the step it was admitted (a test checks U^M against the KV trace).
"""
