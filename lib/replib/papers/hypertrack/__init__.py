"""HyperTrack at CPU scale: a toy phone simulator, the unified GUI-agent evaluation kit with its
offline, semi-online and online protocols, and SFT against RL fine-tuning (RFT) as the fine-tuning
data grows.

Paper: Qu, Liu, Jin, Zhang, Gao, Liu, Luan, "HyperTrack: Scaling, Benchmarking, and Reasoning of
Vision-Language Agents for Mobile GUI Navigation" (ICML 2026, arXiv 2605.27134). Official code:
the evaluation kit GUIEvalKit, github.com/xiaomi-research/guievalkit (no training code).

Sources. The full text could not be read: the method comes from the abstract, detailed secondary
notes and the kit's code (exact for the metric rules). Not stated there, so chosen here: the
advantage normalisation (standard GRPO), learning rates, budgets, and whether the training
reward's box is enlarged (it is not, here; the evaluation's is, as in the kit).

Modules:

* ``method.py``: the evaluation kit's rules (:func:`step_match`: type match and exact match with
  the 1.2x box enlargement, the 0.14 distance rule and text containment; :func:`episode_metrics`:
  success and goal progress), SOEval's history operator :func:`soeval_history` (psi), the composite
  binary reward :func:`action_reward` (R_type + R_param), DAPO's pieces (:func:`dynamic_sampling`,
  :func:`dapo_loss` with clip-higher and token-level averaging, no KL), SFT's :func:`sft_loss`, and
  the two updates :func:`sft_update`, :func:`rft_update`. Nothing here knows the toy: predictions
  and ground truth come as dicts of arrays in the kit's readable form, so the rules can be pointed
  at any agent.
* ``task.py``: MiniGUI, the toy world (apps with names, styles and layouts on a phone and a
  tablet; tasks OPEN, CLICK, SCROLL, CLICK, TYPE, STOP; a scripted expert's reference track), the
  closed-loop :class:`task.Phone`, the agent :class:`task.GUIPolicy` (an attention pointer over the
  screen's elements), and the kit's three protocol runners on MiniGUI (:func:`task.offline`,
  :func:`task.semi_online`, :func:`task.online`, summarised by :func:`task.evaluate`); any agent
  ``act(obs) -> actions`` can be evaluated with them.
* ``experiment.py``: profiles, the base policy, SFT and RFT at each N, the evaluation of every
  policy on four splits, :func:`experiment.claim_values`.
* ``theory.py``: the theory notebook's helpers (zero-signal groups, the clipped objective, a 1-D
  click toy, the protocols on a two-number agent).
* ``exercises.py``: the exercise graders.

Fidelity notes.

* No vision-language model and no screenshots: a screen is a set of elements (a glyph's look under
  the app's visual style, a box, a kind). The agent is a small attention pointer network trained
  from scratch; its "pretraining" is SFT on a separate pool of 30 apps (phone and tablet), the
  stand-in for a pretrained GUI model such as UI-TARS.
* A click is one token of 20 x 20 bins (the paper's models write coordinates as text). The
  tokens of an action are its type and its arguments; DAPO's token-level average runs over them.
* Dynamic sampling refills the batch: candidates are drawn 32 at a time until 16 groups with mixed
  rewards are kept (at most 8 draws). A first version that drew once kept only about 5 groups per
  step and left RFT six points behind SFT; DAPO's "dropped and replaced" is the refill.
* RFT is step-level, on states with the reference history, as in the paper's step-level GRPO;
  two optimiser steps per batch of samples, so the clip acts from the second; SFT and RFT get the
  same number of optimiser steps and of states per step: a fixed 8 epochs of the N episodes' steps
  at every N (not a fixed number of steps), each method at its own learning rate tuned on the same
  grid on pilot seeds (0.001 for both).
* The 20 unseen apps belong to a visual family absent from pretraining and training (one shared
  distortion of their glyphs, :func:`task.make_world`'s ``unseen_shift``), so the base starts out
  worse on them; the tablet layouts are hardly a shift for the pointer policy, which reads boxes.
* Speed: the RFT reward is scored on integer actions (:func:`experiment.fast_reward`, equal to
  :func:`method.action_reward`), samples use the Gumbel-max trick and draw a click as the mixture it
  is (element, then x, then y), and token log-probabilities of a click come from the mixture's
  K terms rather than the 400-bin table: about 2x faster RFT; seeds run in two processes.
* The history is the last two actions (type, click point, direction), not step descriptions or
  thoughts; a correct action therefore usually equals the reference exactly, and SOEval's history
  differs from the offline one only where a correct click lands in another bin of the box.
* Thinking mode and the 512-sample decision analysis have no analogue here and are left out.
"""
