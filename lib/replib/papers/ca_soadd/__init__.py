"""CA-SOADD: strict one-class audio deepfake detection with centroid-anchored boundary probes, at
CPU scale.

Paper: Zhao, Zhang, Hua, Zhang, Liao, Jiang, "Learning Tight Rejection Boundaries without
Negatives for Strict One-Class Audio Deepfake Detection" (ICML 2026; no arXiv version). Official
code: github.com/120L020310/CA-SOADD (PyTorch Lightning, XLS-R 300M). The full paper text was not
available: the method is reconstructed from the official code [C] and a third-party summary [S].

Modules:

* ``task.py``: the toy world. A numpy source-filter synthesiser of bona fide speech-like audio
  (jitter, shimmer, breath noise, formant tracks; 8 kHz, 1 s), five attacks (A1 Griffin-Lim, A2
  LPC-buzz vocoder, A3 oversmoothed re-rendering, A5 harmonic vocoder, and A4 splicing, which
  resembles the Perm probe),
  :func:`task.build_corpus`, the probe operators (Perm, PhaseScr, SpecMask, Resamp and IDInv) and
  the benign view, and the frozen front-end :class:`task.FrontEnd` (four "layers" of frame
  features, the stand-in for the SSL encoder).
* ``method.py``: the layer mix and entropy term, online standardisation, the cumulative centroid,
  the score, L_cpt, L_binv, L_cabs (hinge) and the BCE ablation, the total loss, the encoder head,
  the strict one-class training loop, the EER and the bona fide-only threshold.
* ``baselines.py``: OC-SVM, Deep-SVDD and OC-Softmax (bona fide only), and the supervised reference
  (the same head trained on spoofs: the competence and headroom control, never a one-class arm).
* ``theory.py``: cosine collapse and the hinge-vs-BCE gradients (numpy illustrations).
* ``experiment.py``: profiles, the corpus (a cached ``datasets.Dataset``) and feature cache, the
  variants, :func:`experiment.run_experiment` and :func:`experiment.claim_values`.
* ``exercises.py``: the exercise graders.

Fidelity notes:

* [S] and [C] disagree; the chapter follows [S]: L_cabs = max(0, m - s(z, c) + s(z^-, c)) with
  m = 1 (not [C]'s cap max(0, s(z^-, c) + 0.1)), layer-mix temperature 1, benign noise 0.05 RMS.
* The official code's total loss is split over lines without parentheses, so as written only
  lambda_1 L_cpt (+ L_ent) reaches the optimiser after warm-up. We implement the full sum
  lambda_1 L_cpt + lambda_2 L_binv + lambda_3 L_cabs + lambda_4 L_ent, as the paper describes it.
* OS is on (the paper's reading; [C]'s main class leaves it off by default).
* Probes and benign views are drawn once per training clip (the front-end is frozen, so features
  are cached); the paper draws fresh ones every step. One probe operator per batch ([C] "batch").
* The PNCR and VocHF probes (codec / vocoder imitations) are left out; the pool is the four
  structure probes, plus IDInv for the sensitivity claim. The paper's lr 1e-6 is for a pretrained
  encoder; the head here uses 1e-3 (our choice).
* Every seed draws its own corpus (speakers, attacks, probes, views, front-end maps) as well as its
  own initialisation, batches and probe draws. The front-end uses STFT hop 10 ms, 40 mel bands and
  width 64; a coarser one (hop 20 ms, 32 bands, width 24) left every deep head near chance.
"""
