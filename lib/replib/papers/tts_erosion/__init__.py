"""Synthetic erosion and DGSA at CPU scale: a text-to-speech-token LM fine-tuned on real and flat
synthetic speech at growing synthetic ratios, then aligned by DGSA (dual-goal self-alignment) or
Standard DPO, on a simulated speech-token world.

Paper: "Bridging the Stability-Expressivity Gap: Synthetic Data Scaling and Preference Alignment
for Low-Resource Spoken Language Models" (ICML 2026, arXiv 2605.27383; official repository
https://github.com/InsiderX-Pro/SE-Bridge-TTS, with demos and checkpoints but no training code).
The full text was read through the book's digest ``/work/shared/papers/tts_erosion.md``, which flags
the paper's errors; the corrected slope of App. B is used here (Eq. 24; Eq. 22 has its sign
flipped), and App. B.4's sufficient condition for an entropy peak is replaced by the correct one
(H'(0) > 0).

Modules:

* :mod:`.method`: the method, knowing nothing of the toy: the mixture entropy H(p_alpha), its
  slope and end slopes (Sec. 2, App. B); DGSA's lambda schedule, the DPO loss, preference sets,
  L_DGSA and the alignment stage (Sec. 3).
* :mod:`.task`: the speech-token world: (phoneme, pitch-bin) tokens, real speakers with prosodic
  variety, a coverage gap and label noise, three flat synthetic voices, style prompts; the LM
  (:class:`task.SpeechLM`, a GPT-2 with factorised embeddings, trained, scored and sampled with
  :mod:`replib.models.causal_lm`); the metrics on tokens (oracle PER, H_p, R_rep, pitch spread,
  pitch-histogram JS).
* :mod:`.experiment`: the backbone, the synthetic-ratio sweep, DGSA's stage 2 (style-prompt
  switching) and its preference sets, Standard DPO, the profiles and the claim values.
* :mod:`.theory`: helpers of the theory notebook (quantised-Gaussian entropy, mixture curves and
  their peak, DPO on a categorical policy).
* :mod:`.exercises`: the graders of the implementation notebook's exercises.

Fidelity notes. Proposed (the paper does not say): z_style is a same-speaker prompt of 8 speech
tokens; each DPO pair is scored in the context its negative was generated in; the backbone stands
in for the pretrained CosyVoice 2. Standard DPO is read as T_expr alone at weight 1. Not
implemented: TDSC (Sec. 4), rejection sampling, the Table 7 ablations, audio rendering, and every
human rating.
"""
