"""HieRD: hierarchical relational (representation) distillation for vision-language embedding
models, at CPU scale.

Paper: "HieRD: Hierarchical Relational Distillation for Vision-Language Embedding Models" (ICML 2026,
OpenReview ZyqAd4xpT5). Only the abstract, TL;DR and lay summary could be read. No official code was
announced; the method follows a public research codebase that contains the HieRD training runs
(github.com/DanhVinhLe/VLM_Embed, loss ``span_propose_attn``), read from that code since the paper's
method section was not available. Facts and equations carry over; the code is ours.

Modules:

* ``task.py``: the toy world. Scenes of three coloured, patterned tiles in a 2 x 2 layout on a
  smooth random background; grounding questions ("what is in the top left cell") whose answer
  phrase ("a red check") is retrieved among the 16 colour x pattern phrases; the grammar's phrase
  spans; the generated data set (``datasets.Dataset`` through ``core.cached_dataset``); patch
  ground-truth labels; P@1 and in-scene accuracy.
* ``method.py``: the embedder (single-stream causal transformer, EOS pooling) both teacher and
  student are, and the method's pieces, each beside its step: InfoNCE (step 1), text groups (step 2),
  the clustering of teacher vision tokens and its transfer to the student grid (step 3), the
  parameter-free within-group weights (step 4), the relational and token losses (step 5), the
  attention-weighted cross-modal loss (step 6), RKD (step 7) and the total (step 8), with the
  ``detach_groups`` flag of the public code's behaviour.
* ``experiment.py``: profiles and bounds, the shared training loop, the teacher and its
  precomputed targets, the students (contrastive only, global KD = contrastive + RKD, HieRD, HieRD
  without L_cross, HieRD with detached group vectors), the metrics, the detached-gradient check and
  ``claim_values``.
* ``exercises.py``: the graders ``check_group_weights`` and ``check_cross_pi``.

Fidelity notes:

* Layer pairs: teacher hidden states {0, 2, 3} with student {0, 1, 2} (a 3-layer teacher, a 2-layer
  student): pair 1 word level (word groups, fine clusters on teacher layer 0), pairs 2-3 phrase
  level (noun-chunk phrases, coarse clusters on teacher layer 2): our choice, the code's split
  (pair 1 word level, the later pairs phrase level) scaled down to the toy models' depth.
* The cross-modal attention is looked up with the hidden-state index, as in the code: pair (0, 0)
  uses the first layer's map, (2, 1) the third layer's, and the last pair has none.
* Clustering: the code's distance and DBSCAN on a precomputed matrix (our own DBSCAN, the same
  core / noise partition as scikit-learn's; a border point joins its nearest core neighbour's
  cluster), lambda_sp = 0.1; eps and min_samples were calibrated on the teacher alone for the
  16-token grid (the code's 3rd percentile is reported beside them). A student token hit by
  teacher patches of several clusters takes the most frequent (our choice).
* Where the code builds group vectors from detached states (so L^rel and L_cross pass no
  gradient), the main HieRD student lets gradients flow (our choice, as in the code's older
  ``span_propose`` variant; the paper's text could not be checked); the detached
  variant is run too, and a check shows its gradient equals the token-level terms' alone.
* Toy choices not in the paper: soft InfoNCE targets for answers repeated in a batch, gradient
  clipping at 1.0, learning rates and epochs, a 10% warm-up (the code: 3%; the students did not
  learn the toy reliably with 3% at this budget), a learned position per patch, tiles whose patterns
  are visible inside one patch (shapes were not learned at this budget), the teacher trained on the
  same toy data with a larger budget than the students. RKD uses squared distances (the code's).
* Speed, not substance: the structural loss runs all layer pairs and both texts in one batched
  pass, DBSCAN and the ARI run on all images at once, AdamW uses its fused kernel; the losses and
  gradients equal the pair-by-pair form to float rounding (tested).

Device: at the paper profile the models run on `core.model_device` (a GPU when present); smoke and
book run on the CPU.
"""
