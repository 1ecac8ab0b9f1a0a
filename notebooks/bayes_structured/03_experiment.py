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
# # Bayes-optimal responses in latent space: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. say which of the paper's two claims (better answers than beam search, better uncertainty than
#    language-space scores) hold for a tiny language model on three structured tasks, and by how much;
# 2. tell the mechanisms apart: spellings that split an answer's probability, a loss that is not 0-1,
#    and synthesis of an answer that no sample contains;
# 3. read risk-coverage curves.
#
# **Setting (book profile).** One GPT-2-style model (two layers, width 64, about 0.1M parameters,
# random init) per seed is trained from scratch for 600 AdamW steps on a fresh mix of the three tasks of the
# implementation notebook: sets (T1, half the batch), ratings (T2) and labels with synonyms (T3). Each
# seed then decodes 300 fresh test prompts per task. All sample-based decoders use the same $N = 20$
# samples at temperature 1: the Bayes answer (the closed-form centroid of the parsed samples), the
# latent medoid (MBR over the samples) and the string-level majority. Greedy decoding and beam search
# (no length penalty) decode the prompt directly; beam search runs twice, with the conventional 5
# beams and with $N = 20$ beams ("equal beam"), which decodes as many sequences per step as the 20
# samples and so costs the same number of forward passes. The claims compare the method with the
# equal beam and with greedy decoding, the cheapest standard decoder. The losses: Hamming distance to
# the noise-free set $S^*$ (T1), the exact expected absolute error against a fresh noisy rating (T2),
# and the error rate against the most probable class (T3); an unreadable answer gets the maximal
# loss. Set answers are read with the lenient parser, which reads an item named twice once:
# $\varphi(\text{"A B A"}) = \{A, B\}$. It is the interpretation map the paper's framework asks
# for, a map from what an answer says to the latent answer, while the strict parser the chapter used
# before turned a repeated item into the maximal loss, so that a single decode lost by its format
# slips and not by its decision rule. The strict reading is still shown at the end. The paper's own
# numbers were not available; the thresholds below are the book's digest's proposals, declared in
# `chapter.yml` before this experiment ran.

# %%
# Colab set-up: installs the book's package, replib, from its repository (branch main).
# Anywhere else (a local clone, the book build, CI) this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import subprocess

    package = "replib @ git+https://github.com/icml2026-replications/replib-book.git@main"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", package],
                         capture_output=True, text=True)
    if pip.returncode != 0:  # show pip's own words, then stop
        print(pip.stdout, pip.stderr)
        raise RuntimeError("installing replib failed: pip's output is printed above")

# %% tags=["parameters"]
profile = None  # "smoke", "book" or "paper"; None reads $REPLIB_PROFILE, else "book"
seeds = None  # list of ints; None takes the profile's seeds
train_steps = None  # AdamW steps per model
n_test = None  # test prompts per task
n_samples = None  # samples N per prompt for the sample-based decoders
temperature = None  # sampling temperature
num_beams = None  # beams of the beam-search baseline

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from replib import core
from replib.models import causal_lm
from replib.papers.bayes_structured import experiment, method
from replib.papers.bayes_structured import task as toy

core.set_style()
torch.set_num_threads(1)  # one thread: the numbers do not depend on the machine's thread count
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     train_steps=train_steps, n_test=n_test, n_samples=n_samples, temperature=temperature,
                     num_beams=num_beams)
if max(cfg.n_grid) != cfg.n_samples:  # the sample-size grid ends at the N actually drawn
    cfg.n_grid = [m for m in cfg.n_grid if m < cfg.n_samples] + [cfg.n_samples]
ledger = core.Ledger("bayes_structured", cfg.profile, cfg.seeds, parameters=vars(cfg))
cfg

# %% [markdown]
# ## Training and decoding

# %%
results = experiment.run_experiment(cfg, progress=core.progress)
table = results["table"]
final_loss = [float(np.mean(run["losses"][-50:])) for run in results["runs"]]
print("training loss over the last 50 steps, per seed:", np.round(final_loss, 3),
      "nats/token (the noise floor of the training data is about 1.50)")
table.groupby("task")["parsed samples"].mean().div(cfg.n_samples).rename("share of readable samples").round(3)

# %% [markdown]
# Why set samples fail the strict parser, as shares of all set samples (the lenient parser reads the
# ones that repeat an item):

# %%
set_samples = (table.task == "sets").sum() * cfg.n_samples
failures = table[["samples repeating an item", "samples cut off"]].sum() / set_samples
failures["other unparsable"] = 1 - table.loc[table.task == "sets", "strict parsed samples"].sum() / set_samples - failures.sum()
failures.round(3)

# %% [markdown]
# In the book-profile run almost every sample was readable (99% of the set samples, 97.5% of the
# ratings, 98% of the labels). Under the strict parser only 37% of the set samples would be: 62.5%
# named an item twice. The model has learned the format but not yet that a list of distinct items
# never repeats one; the lenient reading keeps what such an answer says.
#
# ## Which decoder gives the best answers?

# %%
losses = experiment.decoder_losses(table)
summary = losses.groupby("task").agg(["mean", "std"]).round(3)
summary

# %%
fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
colors = [f"C{i}" for i in range(len(experiment.DECODERS))]
for ax, task, unit in zip(axes, method.TASKS, ["hamming loss", "expected absolute error", "error rate"]):
    mean = losses.loc[task].mean()
    sd = losses.loc[task].std().fillna(0.0)
    ax.bar(range(len(experiment.DECODERS)), mean, yerr=sd, color=colors, capsize=3)
    ax.set_xticks(range(len(experiment.DECODERS)), experiment.DECODERS, rotation=30, ha="right")
    ax.set(title=task, ylabel=unit)
plt.tight_layout()
plt.show()

# %% [markdown]
# *Figure 1. Mean loss per decoder and task (lower is better): Hamming distance to the true set
# (sets), expected absolute error (ratings), error rate against the most probable class (labels).
# Bars: mean over seeds; error bars: standard deviation over seeds.*

# %% [markdown]
# On labels, which class does each decoder name? Share of test prompts per rank of the named class
# (0 = the most probable class, 1 = the second, ...; unparsable answers are left out):

# %%
labels = table[table.task == "labels"]
pd.DataFrame({d: labels[f"rank {d}"].value_counts(normalize=True) for d in experiment.DECODERS}).fillna(0.0).round(3)

# %% [markdown]
# Mean set size per decoder against the true size (unparsable answers are left out of the means). If
# string decoding lost because of spellings, its sets would be smaller than the Bayes sets:

# %%
sets = table[table.task == "sets"]
sizes = sets.groupby("size truth")[[f"size {d}" for d in experiment.DECODERS]].mean()
sizes.columns = list(experiment.DECODERS)
sizes.index.name = "true size"
sizes.round(2)

# %% [markdown]
# ## One set prompt, up close
#
# The first test prompt of the first seed with a true set of at least five items for which at least
# one of a fresh draw of samples is readable: the samples as rows, the items as columns.

# %%
first = results["runs"][0]
problems = first["problems"]["sets"]
generator = torch.Generator().manual_seed(100 * cfg.seeds[0])
max_new = toy.max_answer_tokens("sets")
for example in np.flatnonzero(problems["size"] >= 5):
    prompt = torch.as_tensor(problems["prompt"][example:example + 1], device=first["model"].device)
    samples, _ = causal_lm.sample(first["model"], prompt.repeat_interleave(cfg.n_samples, 0), max_new,
                                  eos_id=toy.EOS, pad_id=toy.PAD, temperature=cfg.temperature, generator=generator)
    parsed = [toy.interpret("sets", s) for s in samples.cpu().numpy()]
    if any(p is not None for p in parsed):
        break
matrix = np.array([p if p is not None else np.full(method.N_ITEMS, np.nan) for p in parsed], dtype=float)
latents, _ = toy.parsed_latents("sets", samples.cpu().numpy(), phi=lambda a: toy.interpret("sets", a))
bayes, risk = method.bayes_response("sets", latents)
beam_ids = causal_lm.beam_search(first["model"], prompt, max_new, num_beams=cfg.n_samples, eos_id=toy.EOS, pad_id=toy.PAD)
beam = toy.interpret("sets", beam_ids[0].cpu().numpy())
truth = problems["truth"][example]

# %%
fig, (top, mid) = plt.subplots(2, 1, figsize=(6, 7.5), gridspec_kw={"height_ratios": [1, 4]}, sharex=True)
top.bar(range(method.N_ITEMS), latents.mean(0), color=["C2" if b else "C7" for b in bayes])
top.axhline(0.5, color="k", ls="--", lw=0.8)
top.set(ylabel="$q_e$", ylim=(0, 1))
rows = np.vstack([matrix, np.full(method.N_ITEMS, np.nan), truth, np.full(method.N_ITEMS, np.nan) if beam is None else beam,
                  bayes])
cmap = plt.get_cmap("Greys").copy()
cmap.set_bad("0.85")
mid.imshow(np.ma.masked_invalid(rows), cmap=cmap, vmin=0, vmax=1.4, aspect="auto")
labels = [f"sample {i + 1}" for i in range(len(matrix))] + ["", "true set", "equal beam", "bayes"]
mid.set_yticks(range(len(rows)), labels, fontsize=7)
mid.set_xticks(range(method.N_ITEMS), toy.ITEMS)
mid.set(xlabel="item")
mid.grid(False)
plt.show()
in_samples = any(p is not None and np.array_equal(p, bayes) for p in parsed)
print(f"Hamming loss: equal beam {toy.task_loss('sets', beam, truth):.0f}, Bayes {toy.task_loss('sets', bayes, truth):.0f}; "
      f"Bayesian risk {risk:.2f}; the Bayes set is {'one' if in_samples else 'none'} of the samples")

# %% [markdown]
# *Figure 2. Fresh samples of one set prompt (rows) over the ten items (columns; a dark cell means
# the answer names the item, a grey row is unreadable, beam search included). Top: the share q_e of
# readable samples naming each item, with the 1/2 threshold; the Bayes answer is every item above
# it. Bottom rows: the true set, the answer of beam search with N beams and the Bayes answer.*

# %% [markdown]
# ## Does more sampling help?

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
for ax, task, unit in zip(axes, ["sets", "ratings"], ["hamming loss", "expected absolute error"]):
    for decoder, marker in [("bayes", "o"), ("medoid", "s")]:
        curve = experiment.sample_size_curve(table, cfg.n_grid, decoder).loc[task]
        ax.errorbar(cfg.n_grid, curve.mean(), yerr=curve.std().fillna(0.0), marker=marker, capsize=3, label=decoder)
    ax.set(xscale="log", xlabel="samples $N$", ylabel=unit, title=task)
    ax.set_xticks(cfg.n_grid, cfg.n_grid)
    ax.minorticks_off()
    ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 3. Mean loss of the Bayes answer and of the medoid computed from the first N of the
# samples, for sets (left) and ratings (right); mean over seeds, error bars: standard deviation over
# seeds. A prompt none of whose first N samples parses falls back to the greedy answer, which weighs
# on the smallest N for sets.*

# %% [markdown]
# ## Which score knows when the answer is wrong?
#
# Spearman correlation with the Bayes answer's loss (higher is better), AUROC for telling a non-zero
# loss from a zero loss (higher is better) and the area under the risk-coverage curve (lower is
# better), means over seeds. On ratings every answer has a positive expected loss, so AUROC is
# undefined there (`NaN`).

# %%
quality = experiment.uncertainty_quality(table)
quality.groupby(["task", "score"])[["spearman", "auroc", "aurc"]].mean().round(3)

# %% [markdown]
# Two things the scores do not see directly, set size and the number of readable samples, and how
# they relate to the Bayes answer's loss on sets (Spearman, pooled over seeds):

# %%
print(f"true set size:     {toy.spearman(sets['size truth'], sets['loss bayes']):+.3f}")
print(f"readable samples:  {toy.spearman(sets['parsed samples'], sets['loss bayes']):+.3f}")
print(f"bayesian risk and readable samples: {toy.spearman(sets['bayesian risk'].fillna(np.inf), sets['parsed samples']):+.3f}")

# %%
fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
for ax, task in zip(axes, method.TASKS):
    group = table[table.task == task]
    for score in ["bayesian risk", "predictive entropy", "semantic entropy", "beam nll"]:
        coverage, kept = toy.risk_coverage(group[score].fillna(np.inf).to_numpy(), group["loss bayes"].to_numpy())
        ax.plot(coverage, kept, label=score)
    ax.set(xlabel="coverage", ylabel="mean loss of kept answers", title=task)
axes[0].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 4. Risk-coverage curves (all seeds pooled): the mean loss of the Bayes answers that are
# kept when the prompts with the highest uncertainty score are rejected first. Lower is better; the
# right end is the loss with no rejection.*

# %% [markdown]
# ## The claims

# %%
values = experiment.claim_values(results, cfg)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# ## The strict parser: the reading before this revision
#
# Before this revision the chapter judged sets with the strict parser, which rejects an answer that
# names an item twice; a rejected single decode scores the maximal loss 10, and the Bayes answer sees
# only the samples without a repeat. The same samples and decodes, read strictly (not judged):

# %%
strict = experiment.decoder_losses(table, reader="strict").loc["sets"]
strict["share of parsable samples"] = sets.groupby("seed")["strict parsed samples"].mean() / cfg.n_samples
strict.agg(["mean", "std"]).round(3)

# %%
print("Bayes / beam (5 beams), strict parser, per seed:", (strict["bayes"] / strict["beam"]).round(3).tolist())

# %% [markdown]
#
# %% [markdown]
# ## What we learned
#
# *Written for the book-profile run (three seeds); the numbers above come from whatever run produced
# this page.*
#
# - **Beam search given the method's compute loses to the Bayes answer on sets (c1a holds, 0.79; per
#   seed 0.78, 0.82, 0.76), but only because more beams make beam search worse.** With $N = 20$ beams
#   its sets shrink to almost nothing (0.2 items for true sets of 3 or 4, almost none for 5 to 7; Hamming
#   loss 4.90), the short, probable strings the theory notebook's string mode predicts once the beam
#   is wide enough. The conventional 5-beam search (3.61) is better than both the equal beam and the
#   Bayes answer (3.87): Bayes / 5-beam is 1.07. Equal compute is the fair budget, but here it is not
#   the strongest beam search, and we report both.
# - **Greedy decoding beats the Bayes answer on sets (c1c fails, 1.07; per seed 1.12, 1.06, 1.04).**
#   Greedy 3.61 against Bayes 3.87, on every seed. The Bayes answer is optimal for the model's belief,
#   and this model's belief under-weights membership: few items reach $q_e > 1/2$, so the Bayes sets
#   are small (0.9 items for true sets of 3, 3.4 for true sets of 7), while greedy decoding keeps
#   adding items, because continuing with a remaining true item is usually more probable than
#   stopping. Every decoder under-reports; greedy least.
# - **Why the lenient parser.** The paper's $\varphi$ maps an answer to what it means in the latent
#   space, and "A C A" names the set {A, C}. The strict parser turned a repeat into the maximal loss
#   10, so that a single decode lost by a format slip, not by its decision rule, and it left the
#   Bayes answer only the short samples without a repeat. Read strictly, the same run gives greedy
#   8.99, 5-beam 8.48 and Bayes 4.18 (Bayes / 5-beam 0.50, the old claim's metric): a win for 20
#   draws over one draw on a format the model has not learned, which is not what the paper claims.
#   The lenient reading was not chosen for the method: on the first run it already put greedy ahead.
# - **Synthesis beyond the samples did not help (c2a fails, 1.00).** Bayes 3.87, medoid 3.87 (read
#   strictly, 4.18 against 4.13): on this model the element-wise majority and the best sample
#   coincide on almost every prompt. The example prompt above still shows a Bayes set no sample
#   named.
# - **Ratings: the median does not beat the mode (c3a fails, -0.01; c3c fails, -0.05).** Bayes
#   1.31, equal beam 1.30, 5-beam 1.30, greedy 1.25; the ideal gap on a perfect model is 0.4. The
#   model has not learned the rounded mean of four digits, so its belief is spread over neighbouring
#   centres, which blurs the skew the median exploits. The check c2b is +0.0002 (the median and the
#   medoid differ only by tie-breaking).
# - **Labels: the latent mode wins, by construction (premise c3b, +46 points).** Greedy decoding and
#   both beam searches named the most probable class on 9% of the prompts, the latent mode on 55%:
#   the top class is split over three synonyms.
# - **Uncertainty: the Bayesian risk is not clearly better than predictive entropy (c4a fails,
#   +0.03; c4b fails, +0.03).** On sets the risk (Spearman 0.51) edges predictive entropy (0.48) and
#   the beam NLL (0.50), but the true set size alone reaches 0.55: length carries most of the signal.
#   On ratings every score is weak (about 0.1). On labels, which no claim covers, the risk is best
#   (0.27 against -0.08 for predictive entropy).
# - **More samples mostly help (c5 fragile, mean +0.007; per seed -0.02, +0.05, -0.003).** On one
#   seed the loss rose by 0.05 between two sample sizes.
# - **Cost.** Beam search with 20 beams and drawing 20 samples each took about 3 to 5 s per seed for
#   the 900 test prompts (m1, m2; wall-clock on a shared machine, so it moves between runs): the same
#   order, as equal forward passes should be.
# - **Before this revision** (1,400 training steps at lr 3e-3, the strict parser, 5-beam search as
#   the beam baseline): c1a_sets_vs_beam held (Bayes / 5-beam 0.59), c2a held (0.94), c5 held,
#   c3a_ratings_vs_beam failed (+0.12 < 0.2), c4a failed (-0.16), c4b failed (+0.03); the premises
#   were c1b -1.3 and c3b +78 points. Read leniently, that run had greedy 2.01, 5-beam 2.01 and
#   Bayes 2.06 on sets. The shorter training of this revision (600 steps, so that three seeds fit
#   the budget on one thread) left the model 0.33 nats per token above the noise floor instead of
#   0.2, and it is the weaker model, not the parser, that cost c2a: read strictly it fails too.
#
# ## What we scaled down, and why the effect should survive it
#
# - **The model.** A 0.1M-parameter GPT-2 trained for 600 steps, still about 0.33 nats per token above
#   the noise floor of its data, instead of a pretrained LLM. Its belief is less sharp than a large
#   model's, and on sets it under-weights membership; the decision rules do not care about size, only
#   about how the probability spreads, so a better-trained model could change the set verdicts.
# - **The tasks.** Synthetic stand-ins for multi-answer questions, ratings and classification, each
#   built so that one of the mechanisms is present: spellings (sets, labels) or a loss that is not 0-1
#   (ratings). Real tasks mix them, and have answers whose parser can fail in many more ways.
# - **Not tested.** Graphs and other latent spaces without a closed form; weighting samples by their
#   probability; the paper's own data sets, models and uncertainty metrics, which we could not read.
#
# ## Reading the verdicts

# %%
ledger.report()

# %% [markdown]
# ## Summary
#
# On a tiny language model and three synthetic tasks, deciding in latent space clearly helped only
# where one answer has several spellings: on labels with synonyms greedy decoding and beam search
# named the most probable class on 9% of the prompts, the latent mode on 55%. On sets the Bayes answer
# beat beam search given the same compute (20 beams), but that beam search is worse than the usual
# 5-beam search, and greedy decoding beat the Bayes answer on every seed: the model's belief
# under-weights membership, and the Bayes answer inherits it. On ratings the median did not beat the
# mode. The Bayesian risk was the best uncertainty score only on labels. With sets read leniently (a
# repeated item read once), the paper's claims against standard decoding did not hold here.
#
# ## Exercises
#
# 1. Re-run with `temperature=0.5` (`replib run bayes_structured -p temperature=0.5`). Which decoders
#    change, and why does the Bayes answer depend on the temperature while beam search does not? (The
#    predictive entropy is still computed from the model's own log-probabilities, so at another
#    temperature it becomes a cross-entropy.)
# 2. The Bayes answer is optimal for the model's belief, not for the truth. Compute, for the sets task,
#    the calibration of $q_e$: among items with $q_e$ in a bin, how often are they in $S^*$, and how
#    often would they be in a noisy answer (0.75 for true items, 0.25 for others)?
# 3. With `n_samples=5`, does the Bayes answer still beat the medoid on sets? Explain with the
#    medoid-versus-centroid example of the theory notebook.
