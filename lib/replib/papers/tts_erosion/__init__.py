"""Synthetic erosion, DGSA and TDSC at CPU scale: a text-to-speech-token LM fine-tuned on real and
flat synthetic speech at growing synthetic ratios, then aligned by DGSA (dual-goal self-alignment)
or Standard DPO; and, for a second language with no real speech, TDSC (temperature-diverse
self-critique) against Self-Training; on a simulated speech-token world.

Paper: "Bridging the Stability-Expressivity Gap: Synthetic Data Scaling and Preference Alignment
for Low-Resource Spoken Language Models" (ICML 2026, arXiv 2605.27383; official repository
https://github.com/InsiderX-Pro/SE-Bridge-TTS, with demos and checkpoints but no training code).
The full text could be read; two of its errors are corrected here: the slope of App. B is used in
its corrected form (Eq. 24; Eq. 22 has its sign flipped), and App. B.4's sufficient condition for an
entropy peak is replaced by the correct one (H'(0) > 0).

Modules:

* :mod:`.method`: the method, knowing nothing of the toy: the mixture entropy H(p_alpha), its
  slope and end slopes (Sec. 2, App. B); DGSA's lambda schedule, the DPO loss, preference sets,
  L_DGSA and the alignment stage (Sec. 3); TDSC's temperature ladder, self-critique judge,
  preference pair and update (Sec. 4).
* :mod:`.task`: the speech-token world: (phoneme, pitch-bin) tokens, real speakers with prosodic
  variety, a coverage gap and label noise, three flat synthetic voices, style prompts; the LM
  (:class:`task.SpeechLM`, a GPT-2 with factorised embeddings, trained, scored and sampled with
  :mod:`replib.models.causal_lm`); the metrics on tokens (oracle PER, H_p, R_rep, pitch spread,
  pitch-histogram JS); the second language's cross-lingual synthetic speech; a numpy source-filter
  renderer for listening (no claim uses it).
* :mod:`.experiment`: the backbone, the synthetic-ratio sweep, DGSA's stage 2 (style-prompt
  switching) and its preference sets, Standard DPO, TDSC and Self-Training on the second language,
  the profiles and the claim values.
* :mod:`.theory`: helpers of the theory notebook (quantised-Gaussian entropy, mixture curves and
  their peak, DPO on a categorical policy, tempered distributions and the judge's pass
  probability).
* :mod:`.exercises`: the graders of the implementation notebook's exercises.

Fidelity notes. Proposed (the paper does not say): z_style is a same-speaker prompt of 8 speech
tokens; each DPO pair is scored in the context its negative was generated in; the backbone stands
in for the pretrained CosyVoice 2. Standard DPO is read as T_expr alone at weight 1. TDSC: the
judge's Len counts frames against two frames per text phoneme; the winner's ties go to the
candidate of highest token entropy; TDSC's DPO reference is the model after the iteration's SFT
step (beta = 0.1); the curriculum is compressed to K = 2 at the book profile (T_max 0.9, 1.3;
the paper's k = 2 samples at T_max = 1.0); Self-Training samples as many candidates at T = 1 and
gets as many gradient steps (SFT only, all at the SFT learning rate); the judge is the oracle
decoder (optionally mishearing, ``judge_noise``). Deviations (ours): TDSC's candidates are drawn by
plain ancestral sampling from the tempered distribution, without the paper's nucleus truncation
(p = 0.9, step 1); TDSC's SFT step runs at the chapter's SFT learning rate ``sft_lr`` = 3e-3 (the
paper's Table 11 gives 1e-5; our first plan had 5e-4). Not implemented: rejection
sampling, the Table 7 and Table 8 ablations, and every human rating.

Device: at the paper profile the models run on ``core.model_device`` (a GPU when present); smoke
and book run on the CPU.
"""
