"""ME-DLM: edit-based refinement for parallel masked diffusion language models, at CPU scale.

Paper: Ren, Zhan, Lu, Wang, Yang, Hou, Pan, Li, "ME-DLM: Edit-Based Refinement for Parallel Masked
Diffusion Language Models" (ICML 2026, arXiv 2605.09603); official code
https://github.com/renhouxing/ME-DLM. Only the abstract and the opening of the introduction could be
read; the method follows the official code (its decoding loop, label construction and release
training scripts). Decoding has two phases:

* phase A, a parallel masked-diffusion draft: a canvas of ``[MASK]`` is filled in S forward passes,
  each committing the n_s most confident still-masked positions; then ``<pad>`` is deleted and the
  last token forced to ``<eos>``;
* phase B, E edit passes: one forward pass proposes, for every position i, a token r_i (token
  head; ``<del>`` deletes) and a token g_i for the gap before it (the insertion head of position
  i - 1); all deletions, replacements and insertions are applied in parallel. "No insertion" is
  encoded as g_i = r_i.

Training labels for phase B come from a canonical minimal edit script (Levenshtein backtrace with
priority KEEP > REPLACE > DELETE > INSERT) between the model's own on-policy draft and the clean
response.

Modules:

* :mod:`.method`: the method, knowing nothing of the toy's prompts and answers. The sequence format
  (:data:`VOCAB`, :data:`SEP`, :data:`MASK`, :data:`DEL`, :data:`EOS`, :data:`PAD`, :data:`IGNORE`,
  :data:`MIN_PROMPT`, :data:`MAX_PROMPT`, :data:`CANVAS`, :data:`RESP_START`, :data:`SEQ_LEN`,
  :func:`encode_prompts`, :func:`clean_canvas`; shared with the toy, so defined in the lowest
  module); edit scripts (:func:`levenshtein` and its batched twin :func:`levenshtein_batch`,
  :func:`edit_script`, :func:`edit_labels` and its
  batched twin :func:`edit_labels_batch`, :func:`apply_edits` and :func:`apply_edits_batch`); the
  model and the two training modes (:func:`new_model`, :func:`mask_mode_loss`,
  :func:`fill_masks_random`, :func:`edit_mode_batch`, :func:`edit_mode_loss`); inference
  (:func:`step_schedule`, :func:`draft`, :func:`edit_passes`).
* :mod:`.task`: the toy ("one prompt, three valid answers"): :func:`valid_answers`,
  :func:`is_valid`, :func:`nearest_valid_distance`, :data:`MODES`, :func:`nearest_mode`,
  :data:`HELDOUT_SHARE`, :func:`prompt_split` (the fixed split of the prompt space into training
  and held-out prompts), :func:`draw_prompts`, :func:`training_corpus` (training prompts only),
  :func:`corpus_examples`, :func:`edit_targets`, :func:`response_answer`, :func:`detok`.
* :mod:`.baselines`: :func:`oracle_edit_passes`, the headroom arm (edit passes whose proposals are
  the release's labels against the nearest valid answer: the best E edit passes can do).
* :mod:`.experiment`: :func:`curriculum_passes`, :func:`train_phase` (both phases, on the toy's
  batches), :data:`EXPERIMENT_PROFILES`, :func:`evaluate`, :func:`copy_check` (precondition p2),
  :func:`run_seed`, :func:`run_experiment`, :func:`claim_values`, :func:`paired_bootstrap` (over
  held-out prompts, beside the ledger's interval over seeds). The MDLM baseline and the
  substitution-only ablation are a few lines each (in :func:`run_seed` and a flag of
  :func:`edit_passes`).
* :mod:`.theory`: :func:`marginal_vs_joint_example`, :func:`worked_edit_examples`,
  :func:`oracle_stuck_rate`.
* :mod:`.exercises`: :func:`check_levenshtein`, :func:`check_step_schedule`, :func:`check_apply_edits`.

Conventions. Token ids: digits 0-9 are ids 0-9, ``SEP`` = 10, ``MASK`` = 11, ``DEL`` = 12,
``EOS`` = 13, ``PAD`` = 14. A prompt is a digit string x of length 2-3 (our toy; we first planned 3-5,
see the fidelity notes); its valid answers are reverse(x), sort(x) and x with every digit doubled
(length 2-6). A sequence has the fixed length 11: the prompt *left*-padded with ``PAD`` to 3
tokens, ``SEP`` (position 3), then the response canvas of 7 positions (4..10). The response is the
answer + ``EOS`` + ``PAD`` up to the canvas, so the model learns the length by predicting padding.
After the draft deletes ``PAD``, responses have variable length (at most 7); they are right-padded
with ``PAD`` in the tensor and hidden with the attention mask. The answer a response stands for is
its tokens before the first ``EOS`` (:func:`response_answer`); it is valid iff it equals one of the
three answers.

Fidelity notes (differences from the release, all deliberate, see also the chapter):

* Scale: a 2-3 layer BERT-style encoder (:class:`replib.models.masked_lm.TwoHeadMLM`) trained from
  scratch on the toy, not LLaDA-8B; canvas 7, not 512; P in {2, 4, 7} (not {2, 4, 8, 16});
  E_max = 4 curriculum edit passes (not 32). Stages 1-2 of the release (pretraining, mask-mode SFT)
  are one phase here ("phase 1", mask mode), stage 3 is "phase 2" (edit mode with probability 0.5).
* The toy (ours) is shorter than first planned: prompts of 2-3 digits, not 3-5. Pilots of the MDLM alone
  (issue 17) found that on 3-5 digits a two-layer network reaches only 40-70% validity at one token
  per pass within the book's budget (reverse and sort, which share length and digits, are the modes
  it does not learn), against 80-90% on 2-3 digits.
* Budget: the book profile uses d = 64, 3 layers, batches of 64 and 1600 / 600 steps (about 80
  CPU-seconds per seed, two seeds at a time on two cores, 300 held-out test prompts), chosen on pilot
  seeds by precondition p1 alone (issue 43: with held-out prompts, batches of 32 and 1000 / 600 steps
  left p1 at 81.3 on a pilot seed, batches of 64 at 91.3 and 81.7); the paper profile uses d = 96, 3
  layers, batches of 64 and 3000 / 1500 steps.
* The MDLM baseline is compute-matched in optimiser steps: it continues from the *same* phase-1
  checkpoint for ``steps2`` more mask-mode steps, so the two models differ only in phase 2.
* AdamW (weight decay 0.01), linear warm-up over ``warmup`` steps, then cosine decay to 0, set up
  afresh for phase 1 and for each phase-2 branch (the release's stages are separate runs, each with
  its own warm-up and cosine schedule). Gradients are clipped at norm 1 (the HF Trainer default the
  release runs with).
* Loss weighting: LLaDA's, not the release's. One mask ratio per row, stratified over the batch and
  floored at 1e-3; in mask mode each head's loss is the sum of the masked cross-entropies of a row
  divided by t L (L = 7, the canvas), averaged over the rows. The release divides the *mean* over a
  row's masked tokens by t, which puts most of the weight on rows with few masks (issue 17 measured
  it: rows with t > 0.5 got 24% of the gradient weight, against 50% under LLaDA's). In edit mode t
  only sets the draft's corruption and every position is supervised, so the loss is the sum over
  positions divided by L, without 1/t. Every response token, the first included, can be masked (the
  release never masks the first response token, which there is a chat-template token; here it is
  the answer's first digit, which the model must learn).
* Edit-mode drafts: one P per batch; the fill forbids ``<del>`` and ``[MASK]``; as at inference,
  ``<pad>`` is deleted and the last token forced to ``<eos>`` before the k curriculum edit passes.
  The curriculum k = floor(q E_max) ramps over the second half of phase 2 only (q goes from 0 to 1
  there; the release ramps over its whole stage), so that the network first learns to copy on fresh
  drafts before it is fed its own edits. Edited responses are truncated to the canvas (7 tokens): the
  release caps the total length too.
* Edit-mode labels are built against the valid answer *nearest* to the draft (Levenshtein; the
  drawn answer on ties, :func:`.task.edit_targets`), not always against the drawn one. The release
  has one reference response per prompt and labels against it; the toy has three, and a draft that
  the model filled from the drawn answer is often another valid answer, which labels against the
  drawn one would ask the model to rewrite (before this revision, about one valid answer in eight
  was rewritten by two edit passes, precondition p2). With a single valid answer the rule is the
  release's.
* Training data: each seed's examples come from a generated corpus (:func:`.task.training_corpus`,
  a cached ``datasets.Dataset``) read in order; the two phase-2 branches read the same rows. A
  fixed 30% of the prompts of each length (30 two-digit, 300 three-digit; :func:`.task.prompt_split`,
  the same for every seed) never enter a corpus; every evaluation (claims, the learning curve) is on
  them (issue 43: before, test prompts came from the same 1,100-prompt space as the training rows).
* The network's forward pass is the library BERT encoder's written out (:func:`.method.new_model`):
  the same function and weights within float rounding, less per-call overhead.
* Inference forbids ``[MASK]`` as a prediction besides the documented ``<del>`` rule (a trained
  model never predicts it; this only removes a degenerate case). Substitution-only editing (the
  ablation) applies the replacements only: a proposed ``<del>`` keeps the token, insertions are
  ignored, so the length never changes.
* The label builder follows the release exactly, corner cases included: the equal-neighbour shift
  is not applied to gap 0, so e.g. "cb" -> "ccb" is never repaired by an oracle pass
  (``check_gap0=True`` is the obvious fix, offered as an option and measured, not used in training).

Device: at the paper profile the models run on `core.model_device` (a GPU when present); smoke and
book run on the CPU.
"""
