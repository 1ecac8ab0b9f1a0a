"""ME-DLM: edit-based refinement for parallel masked diffusion language models, at CPU scale.

Paper: Ren, Zhan, Lu, Wang, Yang, Hou, Pan, Li, "ME-DLM: Edit-Based Refinement for Parallel Masked
Diffusion Language Models" (ICML 2026, arXiv 2605.09603); official code
https://github.com/renhouxing/ME-DLM. Only the abstract and the opening of the introduction could be
read; the method follows the official code as summarised in the digest
``/work/shared/papers/me_dlm.md``. Decoding has two phases:

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
  :data:`MAX_PROMPT`, :data:`CANVAS`, :data:`RESP_START`, :data:`SEQ_LEN`, :func:`encode_prompts`,
  :func:`clean_canvas`; shared with the toy, so defined in the lowest module); edit scripts
  (:func:`levenshtein`, :func:`edit_script`, :func:`edit_labels`, :func:`apply_edits`); the model
  and the two training modes (:func:`new_model`, :func:`mask_mode_loss`, :func:`fill_masks_random`,
  :func:`edit_mode_batch`, :func:`edit_mode_loss`); inference (:func:`step_schedule`,
  :func:`draft`, :func:`edit_passes`).
* :mod:`.task`: the toy ("one prompt, three valid answers"): :func:`valid_answers`,
  :func:`is_valid`, :func:`nearest_valid_distance`, :func:`draw_prompts`, :func:`response_answer`,
  :func:`detok`.
* :mod:`.experiment`: :func:`train_phase` (both phases, on the toy's batches),
  :data:`EXPERIMENT_PROFILES`, :func:`evaluate`, :func:`run_seed`, :func:`run_experiment`,
  :func:`claim_values`. The MDLM baseline and the substitution-only ablation are a few lines each
  (in :func:`run_seed` and a flag of :func:`edit_passes`).
* :mod:`.theory`: :func:`marginal_vs_joint_example`, :func:`worked_edit_examples`,
  :func:`oracle_stuck_rate`.
* :mod:`.exercises`: :func:`check_levenshtein`, :func:`check_step_schedule`, :func:`check_apply_edits`.

Conventions. Token ids: digits 0-9 are ids 0-9, ``SEP`` = 10, ``MASK`` = 11, ``DEL`` = 12,
``EOS`` = 13, ``PAD`` = 14. A prompt is a digit string x of length 3-5; its valid answers are
reverse(x), sort(x) and x with every digit doubled (length 3-10). A sequence has the fixed length
17: the prompt *left*-padded with ``PAD`` to 5 tokens, ``SEP`` (position 5), then the response
canvas of 11 positions (6..16). The response is the answer + ``EOS`` + ``PAD`` up to the canvas, so
the model learns the length by predicting padding. After the draft deletes ``PAD``, responses have
variable length (at most 11); they are right-padded with ``PAD`` in the tensor and hidden with the
attention mask. The answer a response stands for is its tokens before the first ``EOS``
(:func:`response_answer`); it is valid iff it equals one of the three answers.

Fidelity notes (differences from the release, all deliberate, see also the chapter):

* Scale: a 2-3 layer BERT-style encoder (:class:`replib.models.masked_lm.TwoHeadMLM`) trained from
  scratch on the toy, not LLaDA-8B; canvas 11, not 512; P in {2, 4, 8, 11} (not {2, 4, 8, 16});
  E_max = 4 curriculum edit passes (not 32). Stages 1-2 of the release (pretraining, mask-mode SFT)
  are one phase here ("phase 1", mask mode), stage 3 is "phase 2" (edit mode with probability 0.5).
* Budget: on this 2-core machine a mask-mode step at batch 64 (d = 64, 2 layers, two threads) costs
  ~17 ms and an edit-mode step ~50 ms. The book profile uses d = 64, 2 layers and 700 / 400 steps
  (about 2 minutes for three seeds, 300 test prompts), which does not train the toy well (the
  chapter says so); the paper profile (d = 96, 3 layers, 3000 / 1500 steps) does.
* The MDLM baseline is compute-matched in optimiser steps: it continues from the *same* phase-1
  checkpoint (weights and AdamW state) for ``steps2`` more mask-mode steps, so the two models differ
  only in phase 2.
* AdamW (weight decay 0.01), linear warm-up over ``warmup`` steps, then cosine decay to 0 over
  ``steps1 + steps2``; both phase-2 branches continue phase 1's schedule. Gradients are clipped at
  norm 1 (the HF Trainer default the release runs with).
* One mask ratio t ~ U(0, 1) per row (the release: per packed row), floored at 1e-3; each row's loss
  is (mean CE_cur + mean CE_nxt) / t in both modes, as in the release, and the batch loss is the mean
  over rows. Every response token,
  the first included, can be masked (the release never masks the first response token, which there
  is a chat-template token; here it is the answer's first digit, which the model must learn).
* Edit-mode drafts: one P per batch; the fill forbids ``<del>`` and ``[MASK]``; as at inference,
  ``<pad>`` is deleted and the last token forced to ``<eos>`` before the k = floor(progress * E_max)
  curriculum edit passes. Edited responses are truncated to the canvas (11 tokens): the release caps
  the total length too.
* Inference forbids ``[MASK]`` as a prediction besides the documented ``<del>`` rule (a trained
  model never predicts it; this only removes a degenerate case). Substitution-only editing (the
  ablation) applies the replacements only: a proposed ``<del>`` keeps the token, insertions are
  ignored, so the length never changes.
* The label builder follows the release exactly, corner cases included: the equal-neighbour shift
  is not applied to gap 0, so e.g. "cb" -> "ccb" is never repaired by an oracle pass
  (``check_gap0=True`` is the obvious fix, offered as an option and measured, not used in training).
"""
