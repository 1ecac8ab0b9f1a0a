"""L2M (Learning-To-Measure) at CPU scale: one small transformer pre-trained on synthetic tabular
tasks predicts labels in context with uncertainty, and its selector head acquires features one at a
time by amortised greedy conditional mutual information.

Paper: "Learning-To-Measure: In-Context Active Feature Acquisition" (Kobayashi, Jing, Yao, Namkoong,
Joshi; ICML 2026, arXiv 2510.12624; official code https://github.com/reAIM-Lab/Learning-To-Measure).
The abstract, summaries, reviews and the complete official code could be read, not the paper's
tables; tokens, masks, losses and the selector objective follow the official code.

Modules:

* :mod:`.task`: the task prior (sparse linear or random tanh-network labels on six features, MCAR
  missingness), the Gaussian NLL and the label-marginal reference.
* :mod:`.method`: tokens, the autoregressive and inference attention masks, :class:`~.method.L2M`,
  the prequential loss with acquisition-state augmentation, the straight-through Gumbel selector
  objective, greedy test-time acquisition.
* :mod:`.baselines`: per-task masked MLPs and GDFS-style selectors, batched over tasks.
* :mod:`.experiment`: profiles, one seed's run, the claim values.
* :mod:`.theory`: Gaussian CMI, the Covert identity, Bayesian linear regression.
* :mod:`.exercises`: the graders.

Fidelity notes: the model is shrunk (width 32, two encoder layers, ~25k parameters); one random
acquisition depth per target and step instead of all depths; the selector is trained with the
inference mask (the code uses the autoregressive one); features are not re-standardised per task
(every feature is $U(-2, 2)$ by construction); the book prior is sparse linear, not the random tanh
network modelled on the official code's semi-synthetic labels, because the latter did not learn
within the book budget.

Device: at the paper profile the models run on `core.model_device` (a GPU when present); smoke and
book run on the CPU.
"""
