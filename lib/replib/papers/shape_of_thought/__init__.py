"""Shape of Thought (SoT): progressive object assembly via visual chain of thought
(Huo et al., ICML 2026, arXiv 2601.21081; official code https://github.com/yuhuo03/Shape-of-Thought).

Sources: the abstract, the project page's top and the official repository (README results table,
data loader, training arguments, inference script); the paper body could not be read.

Modules:

* ``task``: the toy world (tables of a top and k legs on an 8x8 canvas), assembly traces and
  their cumulative renders, 2x2-patch image tokens, the token sequences of the three variants
  (direct, text-only CoT, SoT) and the metric parsers (numeracy, connectivity, trace stability).
* ``method``: the unified decoder with BAGEL's block attention mask, the training batch (clean
  sequence plus noisy copies of the final image block and, for SoT, one state), the loss (text CE +
  masked-image CE), the seeds' models trained as one stacked model (``stacked_forward``,
  ``train_models``) and the interleaved inference loop with parallel image decoding.
* ``experiment``: profiles, the three-variant experiment (SoT in one process, the baselines in
  another), SoT's teacher-forced trace stability and the claim values.
* ``exercises``: graders of the implementation notebook's exercises.

Fidelity notes: BAGEL is a 7B mixture-of-transformers that generates VAE latents by rectified flow;
here a 2-layer decoder generates discrete patch tokens by masked-token parallel decoding (our
stand-in for flow matching: cross-entropy on masked tokens instead of the velocity MSE,
confidence-ordered unmasking instead of flow steps, no classifier-free guidance). The release
trains every image block of a record; for budget we train the final image of every record and, for
SoT, one intermediate state drawn uniformly (our choice), so that SoT's final image is trained as
often as direct generation's only image (image-block matching). T2S-CompBench's scoring is not known: the metrics are deterministic
parsers of ours.

Device: at the paper profile the models run on `core.model_device` (a GPU when present); smoke and
book run on the CPU.
"""
