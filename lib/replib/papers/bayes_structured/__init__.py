"""Bayes-optimal structured responses: task-aware decoding and Bayesian-risk uncertainty, at CPU scale.

Paper: Tomov, Fuchsgruber, Günnemann, "Task-Awareness Improves LLM Generations and Uncertainty"
(ICML 2026, arXiv 2601.21500). No official code. Sampled answers s_i are parsed (phi) into a latent
space with a task distance d_T; the Bayes-optimal response is the argmin over the *whole* latent space
of the mean distance to the parsed samples (a "centroid" the model may never have produced), and the
Bayesian risk U (that minimal mean distance) is the uncertainty score.

Modules (numpy only; scipy's rank helpers when importable; the experiment adds torch and the shared
tiny GPT-2 of :mod:`replib.models.causal_lm`):

* :mod:`.method`: the three latent spaces (:data:`TASKS`, :data:`N_ITEMS`, :data:`N_CLASSES`,
  :data:`MAX_RATING`), the task distances and the decision rule of algorithm steps 3-4:
  :func:`distance`, :func:`expected_distance`, the closed-form Bayes rules :func:`bayes_response`
  (element-wise majority / lower median / mode, with the Bayesian risk), the latent space
  :func:`latent_space` and the brute-force check :func:`bayes_by_search`.
* :mod:`.task`: the toy world. Vocabulary (:data:`TOKENS`, :data:`TOKEN_ID`, :func:`encode`,
  :func:`decode`) and the three synthetic tasks: T1 sets, T2 ratings, T3 labels
  (:func:`sample_problems`, :func:`noisy_answer`, :func:`training_batch`, :func:`max_answer_tokens`);
  the interpretation map phi (the strict :func:`parse`, the lenient :func:`parse_set_lenient` and
  :func:`interpret`, the reading the claims judge with), the
  template psi (:func:`render`) and step 2 of the algorithm, :func:`parsed_latents` (it lives here
  because its default phi is the toy's parser); the losses against the truth
  (:func:`hamming_loss`, :func:`expected_rating_loss`, :func:`label_correct`, :func:`task_loss`);
  the uncertainty metrics :func:`spearman`, :func:`auroc`, :func:`risk_coverage`, :func:`aurc`.
* :mod:`.baselines`: the sample-restricted MBR :func:`mbr_medoid`, the string-level vote
  :func:`string_majority`, and the sample-based uncertainty scores :func:`predictive_entropy`,
  :func:`semantic_entropy`, :func:`n_distinct`.
* :mod:`.theory`: a *perfect* model of the T1 data, enumerated exactly (:func:`set_prior`,
  :func:`perfect_next_token_probs`, :func:`perfect_greedy`, :func:`perfect_beam`,
  :func:`string_mode_set`, :func:`string_mode_size_curve`, :func:`perfect_model_table`,
  :func:`risk_estimates`), and the worked examples of the theory chapter
  (:func:`three_item_example`, :func:`medoid_vs_centroid_example`, :func:`entropy_vs_risk_example`
  and the small-universe helpers :func:`set_marginals`, :func:`expected_hamming`).
* :mod:`.exercises`: the exercise graders :func:`check_elementwise_majority`,
  :func:`check_median_bayes`.
* :mod:`.experiment`: :data:`EXPERIMENT_PROFILES`, :func:`train_model` (the shared tiny GPT-2),
  :func:`decode_task` (algorithm steps 1-4 and every baseline on one task), :func:`competence`,
  :func:`beam_width_losses` (the tuning sweep of the beam width), :func:`run_seed`,
  :func:`run_experiment`, the summaries :func:`decoder_losses`, :func:`uncertainty_quality`,
  :func:`sample_size_curve`, and :func:`claim_values`.

Conventions. Token ids are int64; an answer is the token sequence after ``<sep>`` up to and including
the first ``<eos>`` (anything after it, e.g. padding, is ignored; no ``<eos>`` = cut off = unparsable).
Latents: sets are bool arrays over the 10 items A..J (item i = ``ITEMS[i]``), ratings ints 0..10,
labels class ids 0..3. Stacked latents of N samples: (N, 10) bool, (N,) int, (N,) int. Weights of the
samples are uniform (1/N over the *parsable* samples). Logs are natural.

Fidelity notes (the accessible text of the paper is the abstract, the opening of the introduction
and the Fig. 1 caption; no official code was found):

* Standard decision theory fills the gaps: Hamming -> element-wise majority, absolute loss -> median,
  0-1 -> mode, each with its closed-form Bayesian risk (textbook results; the accessible text does
  not say which the paper uses). The tasks, noise levels, token formats and the perfect-model
  analysis are the book's proposal, not the paper's experiments.
* Tie conventions (each tied choice is equally Bayes-optimal): an item with q_e = 1/2 exactly is
  excluded; for an even number of ratings the lower median is returned (any integer between the two
  middle values is optimal); ties of the label mode go to the smallest class id; the medoid and the
  string vote take the first occurring sample. :func:`bayes_by_search` applies the same conventions
  (fewest items / smallest value among the minimisers), so the two agree exactly.
* The parser. The first book run judged sets with the strict :func:`parse` (a set answer that names
  an item twice is unparsable); half of the tiny model's set samples repeat an item. Since the
  revision of 2026-12-02 the claims judge sets with :func:`interpret` (:func:`parse_set_lenient`:
  a repeat is read once), because a strict reading scores format slips, not decisions; the strict
  losses are still computed and shown.
* Beam search within the method's compute (since issue 43). Beam search runs at one width per task,
  chosen on the pilot seeds from {1, 3, 5, 10, 20} (at most as many sequences per step as the N = 20
  samples) by the lowest mean loss, the grid and rule that also chose N for the Bayes answer; width 1
  is greedy decoding. Before, it ran with N beams, which was a weak beam search (wide beams end
  early on short, probable strings). The Bayes answer falls back to greedy when no sample is
  readable (one more decode, rare under the lenient reading).
* Competence (since issue 43). :func:`.experiment.competence` measures, on fresh held-out
  examples, the model's mean negative log-likelihood of the answer minus the exact entropy of the
  generator's answer (:func:`.task.answer_entropy`), an estimate of KL(generator || model) per
  answer; the preconditions of the chapter gate the claims on it and on the q_e separation.
* Training (:func:`.experiment.train_bucketed`) is ``causal_lm.train_lm``'s AdamW and cosine
  schedule with the loss computed task by task on rows cut to their length
  (:func:`.experiment.bucketed_answer_ce`, the same value as on the full batch).
* The token cap. Sampling stops after 11 set tokens (10 items and ``<eos>``); samples cut off there
  are dropped; the experiment also reads them for the items they name
  (:func:`.task.parse_set_named`) to show the drop does not move q_e.
* Unparsable samples are dropped before the decision; with none left the rules return ``(None, nan)``
  and every loss function scores ``None`` as the maximal loss (10 for sets and ratings, wrong label).
* The perfect model of T1 (:mod:`.theory`): noisy set S (each membership flipped with prob. rho),
  listed in a uniformly random order, then ``<eos>``; a string of a set of size m has probability P(S) / m!.
  Beam search is the textbook one (``width`` hypotheses, sum of log-probs, no length penalty; an
  ``<eos>`` continuation is finished only if it ranks among the top ``width`` continuations, as in
  Hugging Face ``generate`` and fairseq); ties between equal log-probabilities (frequent: the model
  is symmetric in the items) are broken by token order. The exact string mode has genuine ties (at
  rho = 0.25 a set and its subset one item smaller tie whenever the larger has 3 items,
  s rho / (1 - rho) = 1); :func:`string_mode_set` returns the smaller set (our choice, as in the
  estimate we made when designing the experiment).
* Perfect-model numbers (rho = 0.25, true sizes 3..7, mean Hamming loss): string mode 1/2/3/4/5,
  greedy 0/0/1/1/2 and element-wise majority 0, as we estimated when designing the experiment. The
  standard beam search (width 5; width 2 alike, widths 10 and 20 give 1/0/1/1/2) gives 0/0/1/1/2,
  *not* the 1/2/2/4/5 of that design-time estimate: an ``<eos>`` after a short prefix never ranks
  among the top continuations, because continuing with a remaining true item is always more
  probable than stopping, so the beam follows the greedy path. Only the
  variant that finishes *every* ``<eos>`` continuation (``eos_rule="all"``) finds the string mode
  (1/2/3/4/5; the estimate's s = 5 value 2 is the other side of an exact tie between a 2-set and a
  3-set string, decided there by rounding).

Device: at the paper profile the models run on `core.model_device` (a GPU when present); smoke and
book run on the CPU.
"""
