# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Bayes-optimal responses in latent space: implementation
#
# This notebook builds the method piece by piece from the package `replib.papers.bayes_structured`
# (the tasks in its module `task`, imported as `toy`; the method in `method`; the baselines in
# `baselines`) and the shared tiny language model in `replib.models.causal_lm`, each piece beside the
# step it implements and checked on inputs small enough to verify by hand.
#
# **Learning goals.** After this notebook you can
#
# 1. write the three synthetic tasks, their spellings and their parsers $\varphi$;
# 2. implement the four steps of the algorithm: sample, parse, decide in latent space, report the
#    Bayesian risk;
# 3. train the tiny GPT-2 model (the architecture of OpenAI's GPT-2 language model, made very small)
#    from scratch and decode it by sampling, greedy decoding (the most probable token at each step)
#    and beam search (the most probable few partial answers kept at each step);
# 4. score uncertainty estimates by rank correlation and AUROC (the area under the receiver operating
#    characteristic curve, defined in section 6).
#
# The algorithm, per prompt $x$ (from the paper's abstract and Figure 1; $N$, the temperature and the
# handling of unparsable answers are our choices, as the readable part of the paper does not give
# them):
#
# 1. sample $N$ answers $s_1, \dots, s_N \sim p_\theta(\cdot \mid x)$ at temperature $T$;
# 2. parse them, $\ell_i = \varphi(s_i)$, and drop the unparsable ones;
# 3. answer $\ell_{\text{Bayes}} = \arg\min_{\ell \in \mathcal L} \frac1N \sum_i d_T(\ell, \ell_i)$;
# 4. report the Bayesian risk $U = \frac1N \sum_i d_T(\ell_{\text{Bayes}}, \ell_i)$ as uncertainty.

# %%
# Colab set-up: installs the book's package, replib, from its repository, at the book's version.
# Anywhere else (a local clone, the book build, CI) this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import json
    import subprocess
    import time
    from importlib.metadata import distribution

    package = "replib @ git+https://github.com/icml2026-replications/replib-book.git@main"
    print("installing replib from the book's repository at main ...", end=" ", flush=True)
    started = time.time()
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", package],
                         capture_output=True, text=True)
    if pip.returncode != 0:  # show pip's own words, then stop
        print(pip.stdout, pip.stderr)
        raise RuntimeError("installing replib failed: pip's output is printed above")
    origin = json.loads(distribution("replib").read_text("direct_url.json") or "{}")
    commit = origin.get("vcs_info", {}).get("commit_id", "unknown")[:7]
    print(f"done in {time.time() - started:.0f} s: replib {distribution('replib').version}, commit {commit}")

# %% tags=["parameters"]
profile = None  # "smoke", "book" or "paper"; None reads $REPLIB_PROFILE, else "book"

# %%
import numpy as np
import torch

from replib import core
from replib.core.data import replay_batches
from replib.models import causal_lm
from replib.papers.bayes_structured import baselines, exercises, experiment, method
from replib.papers.bayes_structured import task as toy

core.set_style()
profile = core.resolve_profile(profile)
torch.set_num_threads(1)  # a tiny model trains fastest on one thread, and more oversubscribe a busy machine
demo_steps = {"smoke": 60, "book": 150, "paper": 300}[profile]

# %% [markdown]
# ## 1. Three tasks whose answers have a latent structure
#
# One small vocabulary serves all three tasks; a task token starts each prompt. The training answers
# are noisy, and each answer can be spelled in several ways, which is what spreads a language model's
# probability over strings:
#
# - **T1, sets** (multi-answer questions). The prompt marks a true set $S^*$ of 3 to 7 of the items
#   A to J. The answer lists a noisy copy (each membership flipped with probability $\rho = 0.25$)
#   in a random order: a set of size $s$ has $s!$ spellings.
# - **T2, ratings** on a 0 to 10 scale. The prompt shows four digits; the answer is their rounded
#   mean plus skewed noise $\epsilon \in \{0, +2, +3\}$ with probabilities 0.4, 0.3, 0.3, written as
#   "7" or "07". The most frequent rating (the mode) is not the median.
# - **T3, labels** with synonyms. The prompt indexes one of the 24 orderings of four classes; the
#   answer is a class drawn with probabilities 0.45, 0.30, 0.15, 0.10 in that order. Every class
#   has three words in the vocabulary, but in the training answers only the most probable class is
#   spelled with a random one of its three; the others always appear as their first word.

# %%
rng = np.random.default_rng(0)
for task in method.TASKS:
    problems = toy.sample_problems(task, 1, rng)
    truth = toy.truth_row(task, problems, 0)
    answers = [" ".join(toy.decode(toy.noisy_answer(task, truth, rng))) for _ in range(5)]
    print(f"{task:8s} prompt: {' '.join(toy.decode(problems['prompt'][0]))}")
    print(f"{'':8s} five training answers: {answers}")

# %% [markdown]
# Training sequences are the prompt followed by the answer; the loss covers only the answer tokens,
# marked by `target_mask`:

# %%
ids, target_mask = toy.training_batch(4, np.random.default_rng(1))
for row, mask in zip(ids, target_mask):
    print(" ".join(f"[{t}]" if m else t for t, m in zip(toy.decode(row), mask) if t != "<pad>"))
assert ids.shape == (4, toy.MAX_LEN) and not target_mask[:, : toy.PROMPT_LEN["labels"]].any()

# %% [markdown]
# ## 2. The interpretation map $\varphi$ and the template $\psi$
#
# $\varphi$ turns an answer into a latent: a boolean vector over the ten items, an integer rating, a
# class id. Answers that do not fit the format, and answers cut off before the end token, parse to
# `None` and are dropped in step 2. $\psi$ writes a latent back as text, so that a synthesised answer
# can be returned to the user.

# %%
core.show_source(toy.parse)

# %%
enc = toy.encode
assert toy.parse("sets", enc(["C", "A", "<eos>"])).tolist() == [True, False, True] + [False] * 7
assert toy.parse("sets", enc(["C", "A", "C", "<eos>"])) is None  # an item twice
assert toy.parse("sets", enc(["C", "A"])) is None  # cut off: no end token
assert toy.parse("ratings", enc(["0", "7", "<eos>"])) == toy.parse("ratings", enc(["7", "<eos>"])) == 7
assert toy.parse("ratings", enc(["1", "0", "<eos>"])) == 10 and toy.parse("ratings", enc(["1", "7", "<eos>"])) is None
top_class_words = toy.CLASS_WORDS[0]
assert {toy.parse("labels", enc([w, "<eos>"])) for w in top_class_words} == {0}
latent = toy.parse("sets", enc(["J", "B", "E", "<eos>"]))
print("psi(phi('J B E')) =", " ".join(toy.decode(toy.render("sets", latent))))
assert toy.decode(toy.render("sets", latent)) == ["B", "E", "J", "<eos>"]

# %% [markdown]
# `parse` is strict: it rejects a set answer that names an item twice. The experiment judges sets with
# a lenient reading instead, `interpret`, which reads a repeated item once. An answer "C A C" says
# which items it means, {A, C}; rejecting it would score the format of the answer and not its
# content, and would give a single decode that slips the maximal loss while the samples of the
# Bayes answer simply lose one vote.

# %%
core.show_source(toy.interpret)

# %%
assert toy.interpret("sets", enc(["C", "A", "C", "<eos>"])).tolist() == [True, False, True] + [False] * 7
assert toy.interpret("sets", enc(["C", "A"])) is None  # still cut off
assert toy.interpret("ratings", enc(["0", "7", "<eos>"])) == 7  # other tasks: the strict parser

# %% [markdown]
# ## 3. Step 3: the Bayes-optimal response, and the medoid
#
# The medoid (minimum-Bayes-risk, MBR, decoding over the samples) is the best *sample*: the sampled
# answer with the smallest mean distance to all samples. The Bayes answer may be any latent.
#
# For each task's distance the minimiser over the whole latent space has a closed form (theory
# notebook): the element-wise majority $\{e : q_e > 1/2\}$, $q_e$ the share of samples naming item
# $e$, under Hamming distance (the number of items on which two sets differ), a median under absolute
# loss $\lvert \ell - \ell' \rvert$, the mode under 0-1 loss (1 for a wrong label, 0 for a right one).
# With it comes the risk $U$, the mean distance of the answer to the samples.

# %%
core.show_source(method.bayes_response)

# %%
sets = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 0], [1, 0, 1]], dtype=bool)  # AB, AC, BC, AB, AC
answer, risk = method.bayes_response("sets", sets)
assert answer.tolist() == [True, True, True] and np.isclose(risk, 0.2 + 0.4 + 0.4)  # q = (0.8, 0.6, 0.6)
medoid, medoid_risk = baselines.mbr_medoid("sets", sets)
assert medoid.tolist() == [True, True, False] and np.isclose(medoid_risk, 1.2)
assert method.bayes_response("ratings", np.array([5, 5, 7, 8, 8]))[0] == 7  # median, not the modes 5 and 8
assert method.bayes_response("ratings", np.array([0, 10, 10]))[1] == 10 / 3
assert method.bayes_response("labels", np.array([2, 2, 1, 3]))[0] == 2
print("element-wise majority", answer.astype(int), "risk", risk, "| medoid", medoid.astype(int), "risk", medoid_risk)

# %% [markdown]
# The string-level majority vote counts identical *strings*, before parsing. With five samples that
# spell the same set in different orders and two copies of a smaller set, it picks the smaller set:

# %%
samples = [enc(s) for s in (["A", "B", "C", "<eos>"], ["B", "C", "A", "<eos>"], ["C", "A", "B", "<eos>"],
                            ["A", "B", "<eos>"], ["A", "B", "<eos>"])]
vote = baselines.string_majority(samples, "sets")
latents, n_parsed = toy.parsed_latents("sets", samples)
print("string vote:", " ".join(toy.decode(vote)), "| Bayes set:",
      " ".join(toy.decode(toy.render("sets", method.bayes_response("sets", latents)[0]))))
assert toy.decode(vote) == ["A", "B", "<eos>"] and method.bayes_response("sets", latents)[0][:3].all()

# %% [markdown]
# ## 4. Losses against the truth
#
# Sets are scored by Hamming distance to the noise-free $S^*$, labels by whether they name the most
# probable class, and ratings by the exact expected absolute error against a fresh noisy label,
# $\mathbb E_\epsilon \lvert \hat y - \mathrm{clip}(c + \epsilon, 0, 10) \rvert$. For centre $c = 5$ the
# mode 5 costs $0.3 \cdot 2 + 0.3 \cdot 3 = 1.5$ and the median 7 costs $0.4 \cdot 2 + 0.3 \cdot 1 = 1.1$.
# An unparsable answer gets the maximal loss.

# %%
assert toy.expected_rating_loss(5, 5) == 1.5 and np.isclose(toy.expected_rating_loss(7, 5), 1.1)
assert toy.task_loss("sets", None, np.zeros(10, bool)) == 10
print({answer: round(toy.expected_rating_loss(answer, 5), 2) for answer in range(4, 10)})

# %% [markdown]
# ## 5. The language model: a tiny GPT-2 trained from scratch
#
# `causal_lm.tiny_gpt` builds a GPT-2 configuration from `transformers` with random weights (two
# layers, width 64, four heads: about 0.1M parameters); `train_lm` minimises the cross-entropy of the
# answer tokens (their mean negative log-probability under the model, in nats, the unit of natural
# logarithms) with AdamW, the Adam optimiser with decoupled weight decay. The experiment trains 1,500
# steps per seed; here far fewer (150 at the book profile), enough to see the pieces work.
#
# The training stream is drawn up front as a `datasets.Dataset`: generated by code (nothing is
# downloaded) and cached under `data/cache/`, one row per training sequence in the order training
# reads them (`ds[0]`, `ds.to_pandas()`). Its first rows, decoded (answer tokens in brackets):

# %%
corpus = toy.training_corpus(demo_steps, 64, seed=0)
first = corpus.select(range(4)).to_pandas()
first["text"] = [" ".join(f"[{t}]" if m else t for t, m in zip(toy.decode(ids), mask) if t != "<pad>")
                 for ids, mask in zip(first["ids"], first["target_mask"])]
print(f"{len(corpus):,} rows, columns {corpus.column_names}")
first[["text"]]

# %%
model = causal_lm.tiny_gpt(len(toy.TOKENS), n_positions=toy.MAX_LEN + 1, pad_id=toy.PAD, eos_id=toy.EOS, seed=0)
print(f"{sum(p.numel() for p in model.parameters()):,} parameters")
losses = causal_lm.train_lm(model, replay_batches(corpus, 64), steps=demo_steps, seed=0)
print(f"training loss: first 20 steps {losses[:20].mean():.2f}, last 20 steps {losses[-20:].mean():.2f} nats/token")
assert losses[-20:].mean() < losses[:20].mean()

# %% [markdown]
# The experiment computes the same objective task by task (`experiment.bucketed_answer_ce`): the rows
# of one task go through the model together, cut after their last answer token (a label row is 6
# tokens, a rating row 9, a set row up to 23). With right padding and causal attention the cut
# changes no logit that the loss reads, so the value is the same:

# %%
ids, mask = toy.training_batch(32, np.random.default_rng(1))
ids, mask = torch.as_tensor(ids), torch.as_tensor(mask)
with torch.no_grad():
    logits = model(ids[:, :-1]).logits
    full = torch.nn.functional.cross_entropy(logits[mask[:, 1:]], ids[:, 1:][mask[:, 1:]])
    bucketed = experiment.bucketed_answer_ce(model, ids, mask)
print(f"answer cross-entropy: full batch {full:.6f}, task by task {bucketed:.6f}")
assert torch.isclose(full, bucketed, rtol=1e-5)

# %% [markdown]
# How close a trained model is to the data it learns from has an exact yardstick here: the entropy of
# the generator's answer to each prompt (`toy.answer_entropy`), the lowest mean negative
# log-likelihood any model can reach. For sets it is $10\,h(\rho) + \mathbb{E}\log |S|!$ (the noisy set,
# then one of its $|S|!$ equally likely orders); the experiment's competence preconditions compare the
# model's held-out negative log-likelihood with it (the difference estimates the KL divergence from
# the generator to the model).

# %%
print({size: round(toy.answer_entropy("sets", np.arange(method.N_ITEMS) < size), 2) for size in range(3, 8)},
      "nats per set answer, by true size")
print(f"ratings, centre 5: {toy.answer_entropy('ratings', 5):.2f}; labels: {toy.answer_entropy('labels', np.arange(4)):.2f} nats")

# %% [markdown]
# Step 1 samples with a key-value cache, which keeps each layer's attention keys and values of the
# tokens already generated so that each new token costs one short forward pass (`causal_lm.sample`;
# temperature 0 is greedy decoding), and beam search is `transformers`' `generate` with no length
# penalty. For one set prompt:

# %%
problems = toy.sample_problems("sets", 1, np.random.default_rng(7))
prompt = torch.as_tensor(problems["prompt"])
N = 20
completions, logprobs = causal_lm.sample(model, prompt.repeat(N, 1), toy.max_answer_tokens("sets"), eos_id=toy.EOS,
                                         pad_id=toy.PAD, generator=torch.Generator().manual_seed(0))
latents, n_parsed = toy.parsed_latents("sets", completions.numpy(), phi=lambda a: toy.interpret("sets", a))
bayes, risk = method.bayes_response("sets", latents)
greedy = causal_lm.sample(model, prompt, toy.max_answer_tokens("sets"), eos_id=toy.EOS, pad_id=toy.PAD, temperature=0)[0]
# N beams: as many sequences per decoding step as the N samples (the experiment tunes the width up to N)
beam = causal_lm.beam_search(model, prompt, toy.max_answer_tokens("sets"), num_beams=N, eos_id=toy.EOS, pad_id=toy.PAD)
print("prompt:     ", " ".join(toy.decode(prompt[0])))
print("samples:    ", [" ".join(toy.decode(toy.answer_tokens(c) or [])) for c in completions[:6].numpy()], "...")
print(f"read {n_parsed} of {N}; q_e =", np.round(latents.mean(0), 2))
strict = sum(toy.parse("sets", c) is not None for c in completions.numpy())
print(f"the strict parser would have kept {strict} of {N}")
for name, answer in [("greedy", toy.interpret("sets", greedy[0].numpy())), ("beam", toy.interpret("sets", beam[0].numpy())),
                     ("Bayes", bayes)]:
    text = "unreadable" if answer is None else " ".join(toy.decode(toy.render("sets", answer)))
    print(f"{name:6s} {text:24s} Hamming loss {toy.task_loss('sets', answer, problems['truth'][0]):.0f}")
print(f"Bayesian risk U = {risk:.2f}")
assert completions.shape == (N, toy.max_answer_tokens("sets")) and len(latents) == n_parsed

# %% [markdown]
# After so few steps the model has the format of the answers but not yet the rule that a list
# of distinct items never repeats one: many samples name an item twice. The strict parser would
# drop them, and greedy decoding and beam search could return no valid set at all; the lenient
# reading keeps them. Step 2 is where such choices are made, and they matter: the Bayes answer can
# only be as good as the readable part of the model's belief. The experiment trains longer (and
# reports the share of readable samples under both parsers).

# %% [markdown]
# ## 6. Scoring uncertainty
#
# A good uncertainty score ranks prompts by how wrong the answer is. We compare the Bayesian risk $U$
# with **predictive entropy**, the Monte-Carlo estimate $-\frac1N \sum_i \log p_\theta(s_i \mid x)$ over
# the same samples, with the entropy of $\hat p$ over distinct latents (a discrete "semantic entropy"),
# the number of distinct latents, and the negative log-likelihood of the beam answer (the beam
# answer's own confidence, scored here against the loss of the Bayes answer like every other score).
# The log-probabilities are the model's own, at temperature 1; if the samples are drawn at another
# temperature, "predictive entropy" becomes a cross-entropy between the two. The metrics:
# Spearman's rank correlation with the realised loss (the correlation of the two rankings, from -1 to
# 1), AUROC for telling non-zero loss from zero loss (the probability that a randomly chosen wrong
# answer gets a higher uncertainty score than a randomly chosen right one; 0.5 is chance), and the
# area under the risk-coverage curve, AURC (mean loss of the answers kept when the most uncertain are
# rejected first, averaged over the share kept, the coverage; lower is better).

# %%
score = np.array([0.1, 0.4, 0.35, 0.8])
loss = np.array([0.0, 1.0, 0.0, 2.0])
assert np.isclose(toy.auroc(score, loss > 0), 1.0)  # every error scores above every non-error
assert np.isclose(toy.spearman(score, loss), toy.spearman(score ** 3, loss))  # ranks only
assert np.isclose(baselines.predictive_entropy(np.log([0.5, 0.25])), -(np.log(0.5) + np.log(0.25)) / 2)
coverage, kept_loss = toy.risk_coverage(score, loss)
print("coverage", coverage, "mean loss kept", kept_loss, "AURC", round(toy.aurc(score, loss), 3))

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write the Hamming-Bayes rule: `elementwise_majority(latents)` takes a boolean array
# of $N$ sampled sets over $K$ items and returns the set $\{e : q_e > 1/2\}$ and the risk
# $\sum_e \min(q_e, 1 - q_e)$.

# %% tags=["solution", "hide-input"]
def elementwise_majority(latents):
    q = latents.mean(axis=0)
    return q > 0.5, float(np.minimum(q, 1 - q).sum())


# %%
exercises.check_elementwise_majority(elementwise_majority)

# %% [markdown]
# **Exercise 2.** Write the Bayes rule for absolute loss on integer ratings: `median_bayes(values)`,
# given a NumPy array of integer ratings, returns an integer minimiser of the mean absolute distance
# to the values (for an even count any integer between the two middle values is fine) and that minimal
# mean distance.

# %% tags=["solution", "hide-input"]
def median_bayes(values):
    answer = int(np.sort(values)[(len(values) - 1) // 2])
    return answer, float(np.abs(np.asarray(values) - answer).mean())


# %%
exercises.check_median_bayes(median_bayes)

# %% [markdown]
# **Exercise 3 (open).** Under squared loss the Bayes answer is the mean, which need not be an
# integer. How would you render it for a 0 to 10 rating task, and is the rounded mean still optimal
# among integers?
#
# ## Summary
#
# The method is four short steps around any sampler: parse, decide in latent space with the task's
# closed form, render, and report the risk. The only task-specific parts are the parser and the
# distance. The language model is a standard tiny GPT-2 whose string distribution spreads each answer
# over its spellings, as a real model's does.
