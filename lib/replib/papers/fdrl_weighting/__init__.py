"""Expected Returns and Policy Inconsistency-Aware Offline Federated Deep Reinforcement Learning
(ICML 2026 poster 63115; an earlier version was the withdrawn ICLR 2026 submission "Offline
Federated Deep Reinforcement Learning with Awareness of Expected Returns and Policy Inconsistency",
OpenReview GWjvweJDnG).

Sources. Only the two abstracts and the TL;DR could be read; no official code was found. The host
method, FEDORA (Rengarajan et al., NeurIPS 2024, arXiv 2305.03097), follows its official code
(github.com/DesikRengarajan/FEDORA): TD3+BC clients, the critic target max{min Q', min Q_g}, the actor
loss with proximity to the global and the previous actor, the decay of delta_k, softmax weights
exp(beta J_k) with beta = 0.1 and the overwrite of the clients by the global model. The paper's
additions are our own *proposed* instantiation, because their formulas are not stated:
policy inconsistency PI_k = mean ||pi_k(s) - a||^2 / |A| on the client's data, scaling factor
c = mean_k PI_k / mean_k |J_k|, score S_k = c J_k - PI_k, weights softmax(S_k / std_k S_k), and an
adaptive pull alpha_0,k = rho alpha_0 (rho = 0.1) when the client's own score beats the global
model's, with clients keeping their own weights between rounds.

Modules.

* ``task`` -- Pendulum-v1 re-implemented (gymnasium is not installed), the expert / medium / random
  behaviour policies, the clients' offline data sets, batched evaluation of deterministic policies,
  D4RL-style normalised scores.
* ``method`` -- the batched ensemble (every client of every federation one member), FEDORA's critic
  target, critic and actor losses and decay, the three server weightings (uniform, FEDORA's
  Q-softmax, the combined score), aggregation, the adaptive alpha_0, and the ``Federation`` that runs
  the rounds.
* ``theory`` -- the one-step bandit (critic over-estimation against policy inconsistency) and the
  closed-form proximal optimum of the theory notebook.
* ``experiment`` -- the seven federations per seed, the profiles and bounds, the runs and the claim
  values.
* ``exercises`` -- graders of the policy inconsistency and of the combined weights.

Fidelity notes. FEDORA's defaults are kept (alpha = 2.5, alpha_0 = 1, alpha_1 = 0, alpha_2 = 1,
gamma = 0.99, tau = 0.005, policy noise 0.2 and clip 0.5 times the action bound, actor every 2
critic steps, beta = 0.1); the networks are 32-32 instead of 256-256, the learning rate 3e-3
instead of 3e-4, and rounds are 8 x 250 local steps instead of 1000 x 380, to fit the book's CPU
budget. J_k and PI_k are measured on a fixed subset of at most 1000 of the client's transitions.
There is no per-client state normalisation (it would break parameter averaging).
"""
