"""PhysLogic: Scientific Logicality Enriched Methodology for LLM Reasoning: A Practice in Physics
(Yu, Xu, Chen, Zhao, Wang, Mao; ICML 2026, arXiv 2605.17104).

Sources. Only the abstract and the first lines of the paper could be read. The logicality metrics
follow the official evaluation code (https://github.com/ScienceOne-AI/PhysLogic): sentence
splitting at ``[.!?]+\\s+``, cosine similarities between nexuses and
sentences, greedy one-to-one matching at tau = 0.3, logical fidelity F (weighted recall, count
precision), causal connection O (weighted pairwise order of positional centroids) and inferential
progress P (novelty of each sentence's focus column). The paper's training-data sampling, training
recipe, backbones and numbers were not available.

Modules:

* ``task`` -- PhysChain: every two- and three-step problem over eleven product laws (values up to
  255, one token each), the nexuses and their weights, canonical sentences, the teacher's defects
  (skip, swap, loop, irrelevant, shortcut, slip), the token format and answer scoring.
* ``method`` -- the assessment (steps 1-7) with a TF-IDF encoder that reads every number as the word
  ``num``, ``assess`` for many traces, the selection score S = (F + O + P) / 3 and ``select_traces``
  (logicality-guided, correctness-only, unfiltered).
* ``experiment`` -- the cached candidate corpus (a ``datasets.Dataset``), the defect check (claims
  p2-p5), the reference solutions (the ceiling of F), every seed and condition of the shared tiny GPT
  (``replib.models.causal_lm.tiny_gpt``) fine-tuned as one batched model (stacked weights, the same
  computation, one AdamW per model), evaluated greedily and at temperature 1 (common Gumbel noise for
  the arms of a seed) at half and at the whole budget, the profiles and ``claim_values``.
* ``exercises`` -- graders for O and P.

Fidelity notes. Exact: the metric formulas and their quirks (greedy matching, raw similarities in
the centroids, strict order in O, O = 0.5 for one nexus, P = 1 for one sentence, zero columns
skipped in P, F = O = P = 0 for empty reasoning). Ours (the paper does not state them): the encoder
(TF-IDF over word 1- and 2-grams with a small stop-word list, fitted on the training problems'
nexus and answer sentences, numbers masked, instead of all-MiniLM-L6-v2), the nexus weights (2 for the step that
derives the asked quantity, 1 otherwise), the teacher and its defect rates, best-of-8 selection by
S among correct candidates, supervised fine-tuning of a 0.1M-parameter GPT from scratch, and every
budget. Left out: the out-of-distribution set with longer chains, per-type reporting, the real
benchmark items.

Device: every profile runs on the CPU (the batched tiny models keep two cores busy; the seeds are
split over ``workers`` processes).
"""
