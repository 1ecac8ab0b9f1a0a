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
# random init) per seed is trained from scratch for 1,400 AdamW steps on a fresh mix of the three tasks of the
# implementation notebook: sets (T1, half the batch), ratings (T2) and labels with synonyms (T3). Each
# seed then decodes 300 fresh test prompts per task. All sample-based decoders use the same $N = 20$
# samples at temperature 1: the Bayes answer (the closed-form centroid of the parsed samples), the
# latent medoid (MBR over the samples) and the string-level majority. Greedy decoding and beam search
# (5 beams, no length penalty) decode the prompt directly. The losses: Hamming distance to the
# noise-free set $S^*$ (T1), the exact expected absolute error against a fresh noisy rating (T2), and
# the error rate against the most probable class (T3); an unparsable answer gets the maximal loss. The paper's own numbers were not available; the claims and thresholds below
# are the book's digest's proposals, declared in `chapter.yml` before this experiment ran.

# %%
# Colab set-up: installs the book's package, replib, from its repository (branch main).
# Anywhere else (a local clone, the book build, CI) this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import subprocess

    package = "replib @ git+https://github.com/icml2026-replications/replib-book.git@main"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)

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
from replib.core.runtime import thread_budget
from replib.models import causal_lm
from replib.papers.bayes_structured import experiment, method
from replib.papers.bayes_structured import task as toy

core.set_style()
torch.set_num_threads(thread_budget(2))  # one thread in the smoke run (REPLIB_MAX_THREADS)
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, seeds=seeds, train_steps=train_steps, n_test=n_test,
                     n_samples=n_samples, temperature=temperature, num_beams=num_beams)
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
table.groupby("task")["parsed samples"].mean().div(cfg.n_samples).rename("share of parsable samples").round(3)

# %% [markdown]
# Why set samples fail to parse, as shares of all set samples:

# %%
set_samples = (table.task == "sets").sum() * cfg.n_samples
failures = table[["samples repeating an item", "samples cut off"]].sum() / set_samples
failures["other unparsable"] = 1 - table.loc[table.task == "sets", "parsed samples"].sum() / set_samples - failures.sum()
failures.round(3)

# %% [markdown]
# In the book-profile run almost every rating and label sample parsed, but only about half of the set
# samples, and nearly all the failures named an item twice. The model has learned the format but not
# yet that a list of distinct items never repeats one, and the declared parser rejects such answers.
# Keep this in mind below; an exploratory variant at the end reads repeated items once.
#
# ## Which decoder gives the best answers?

# %%
losses = experiment.decoder_losses(table)
summary = losses.groupby("task").agg(["mean", "std"]).round(3)
summary

# %% mystnb={"figure": {"caption": "Mean loss per decoder and task (lower is better): Hamming distance to the true set (sets), expected absolute error (ratings), error rate against the most probable class (labels). Bars: mean over seeds; error bars: standard deviation over seeds.", "name": "bayes-decoders"}}
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
# one of a fresh draw of samples parses: the samples as rows, the items as columns.

# %%
first = results["runs"][0]
problems = first["problems"]["sets"]
generator = torch.Generator().manual_seed(100 * cfg.seeds[0])
max_new = toy.max_answer_tokens("sets")
for example in np.flatnonzero(problems["size"] >= 5):
    prompt = torch.as_tensor(problems["prompt"][example:example + 1])
    samples, _ = causal_lm.sample(first["model"], prompt.repeat_interleave(cfg.n_samples, 0), max_new,
                                  eos_id=toy.EOS, pad_id=toy.PAD, temperature=cfg.temperature, generator=generator)
    parsed = [toy.parse("sets", s) for s in samples.numpy()]
    if any(p is not None for p in parsed):
        break
matrix = np.array([p if p is not None else np.full(method.N_ITEMS, np.nan) for p in parsed], dtype=float)
latents, _ = toy.parsed_latents("sets", samples.numpy())
bayes, risk = method.bayes_response("sets", latents)
beam_ids = causal_lm.beam_search(first["model"], prompt, max_new, num_beams=cfg.num_beams, eos_id=toy.EOS, pad_id=toy.PAD)
beam = toy.parse("sets", beam_ids[0].numpy())
truth = problems["truth"][example]

# %% mystnb={"figure": {"caption": "Fresh samples of one set prompt (rows) over the ten items (columns; a dark cell means the answer names the item, a grey row is unparsable, beam search included). Top: the share q_e of parsed samples naming each item, with the 1/2 threshold; the Bayes answer is every item above it. Bottom rows: the true set, the beam-search answer and the Bayes answer.", "name": "bayes-example"}}
fig, (top, mid) = plt.subplots(2, 1, figsize=(6, 7.5), gridspec_kw={"height_ratios": [1, 4]}, sharex=True)
top.bar(range(method.N_ITEMS), latents.mean(0), color=["C2" if b else "C7" for b in bayes])
top.axhline(0.5, color="k", ls="--", lw=0.8)
top.set(ylabel="$q_e$", ylim=(0, 1))
rows = np.vstack([matrix, np.full(method.N_ITEMS, np.nan), truth, np.full(method.N_ITEMS, np.nan) if beam is None else beam,
                  bayes])
cmap = plt.get_cmap("Greys").copy()
cmap.set_bad("0.85")
mid.imshow(np.ma.masked_invalid(rows), cmap=cmap, vmin=0, vmax=1.4, aspect="auto")
labels = [f"sample {i + 1}" for i in range(len(matrix))] + ["", "true set", "beam search", "bayes"]
mid.set_yticks(range(len(rows)), labels, fontsize=7)
mid.set_xticks(range(method.N_ITEMS), toy.ITEMS)
mid.set(xlabel="item")
mid.grid(False)
plt.show()
in_samples = any(p is not None and np.array_equal(p, bayes) for p in parsed)
print(f"Hamming loss: beam {toy.task_loss('sets', beam, truth):.0f}, Bayes {toy.task_loss('sets', bayes, truth):.0f}; "
      f"Bayesian risk {risk:.2f}; the Bayes set is {'one' if in_samples else 'none'} of the samples")

# %% [markdown]
# ## Does more sampling help?

# %% mystnb={"figure": {"caption": "Mean loss of the Bayes answer and of the medoid computed from the first N of the samples, for sets (left) and ratings (right); mean over seeds, error bars: standard deviation over seeds. A prompt none of whose first N samples parses falls back to the greedy answer, which weighs on the smallest N for sets.", "name": "bayes-samples"}}
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
# Two things the scores do not see directly, set size and the number of parsable samples, and how
# they relate to the Bayes answer's loss on sets (Spearman, pooled over seeds):

# %%
print(f"true set size:     {toy.spearman(sets['size truth'], sets['loss bayes']):+.3f}")
print(f"parsable samples:  {toy.spearman(sets['parsed samples'], sets['loss bayes']):+.3f}")
print(f"bayesian risk and parsable samples: {toy.spearman(sets['bayesian risk'].fillna(np.inf), sets['parsed samples']):+.3f}")

# %% mystnb={"figure": {"caption": "Risk-coverage curves (all seeds pooled): the mean loss of the Bayes answers that are kept when the prompts with the highest uncertainty score are rejected first. Lower is better; the right end is the loss with no rejection.", "name": "bayes-risk-coverage"}}
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
# ## The claims

# %%
values = experiment.claim_values(results, cfg)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# ## An exploratory variant: a parser that reads repeated items once
#
# The parser is a design choice the paper leaves to the task. Ours was declared strict: an answer that
# names an item twice is not a set. After the first book run showed that half of the set samples
# repeat an item, we added a lenient reading, $\varphi(\text{"A B A"}) = \{A, B\}$, computed on the
# same samples and decodes. It is **not judged**: it was chosen after seeing the results.

# %%
lenient = sets.groupby("seed")[[f"lenient loss {d}" for d in ["greedy", "beam", "medoid", "bayes"]]].mean()
lenient.columns = ["greedy", "beam", "medoid", "bayes"]
lenient["share of parsable samples"] = sets.groupby("seed")["lenient parsed samples"].mean() / cfg.n_samples
lenient.agg(["mean", "std"]).round(3)

# %% [markdown]
# ## What we learned
#
# *Written for the book-profile run (three seeds); the numbers above come from whatever run produced
# this page.*
#
# - **Sets: the Bayes answer beats beam search (c1a holds, 0.59 of beam's loss), but for a reason other
#   than the paper's.** Its mean Hamming loss was 2.47 against 4.36 for beam search and 5.13 for greedy
#   decoding. Most of beam's and greedy's loss comes from unparsable answers (a repeated item scores
#   the maximal loss 10): 20 samples make the Bayes answer robust to parse failures, a single decode
#   is not. The exploratory lenient parser shows it: when repeats are read once, greedy (2.01) and
#   beam search (2.01) are slightly *better* than the Bayes answer (2.06).
# - **Beam-search sets are smaller than the true sets (c1b, -1.3 items on the prompts where beam
#   parses), but this is not evidence for the spellings mechanism.** c1b is a premise, shown and not
#   counted: the generator was built to split each set over spellings. Every decoder under-reports, and
#   the Bayes sets are the smallest of all for true sizes 3 to 5 (2.1 items for true sets of 3): with
#   the strict parser the Bayes answer sees only the duplicate-free samples, which are the shorter
#   ones. The spellings mechanism needs a sharper model than ours (0.2 nats per token above the noise
#   floor), and the theory notebook showed that standard beam search follows the greedy path on this
#   task anyway.
# - **Synthesis beyond the samples helps (c2a holds, 0.94).** The element-wise majority lost 2.47
#   against 2.63 for the medoid (2.06 against 2.15 with the lenient parser), and in the example above
#   it answered a set no sample named. The string-level vote (3.62) is worse than both: it counts
#   orderings as different answers.
# - **Ratings: the median beats the mode, but by less than declared (c3a fails, 0.12 < 0.2).** Bayes
#   1.22, beam search 1.34, greedy 1.31; the ideal gap on a perfect model is 0.4 (1.5 against 1.1).
#   The model has not learned the rounded mean of four digits exactly, so its belief is spread over
#   neighbouring centres, which blurs the skew the median exploits. The check c2b shows a small
#   difference (+0.005) between the median and the medoid: for an even number of parsed samples both
#   middle values are optimal for the model's belief; we return the lower one, the medoid whichever
#   comes first, and with noise that only pushes ratings up the upper one is the better guess. It is
#   a tie-breaking effect, not a bug.
# - **Labels: the latent mode wins by a wide margin (c3b, +78 points), by construction.** It is a
#   premise, not counted as evidence: the generator splits the top class over synonyms. Greedy decoding and beam
#   search never named the most probable class: its probability is split over three spellings, each
#   less likely than the single spelling of the second class, which they named on 60% of the prompts.
#   The latent mode was right 78% of the time.
# - **Uncertainty: the Bayesian risk does not beat predictive entropy on sets or ratings (c4a fails,
#   -0.16; c4b fails, +0.03).** On sets, predictive entropy (Spearman 0.45) and the beam answer's NLL
#   (0.48) rank errors better than the risk (0.29). Both grow with the length of the answer, and the
#   true set size alone has a Spearman correlation of 0.47 with the loss: length carries most of the
#   signal. The risk also misses the strongest warning sign, few parsable samples (Spearman -0.41 with
#   the loss, +0.004 with the risk), which is why the scores built on distinct latents, which shrink
#   when few samples parse, even correlate negatively. On ratings every score is weak (Spearman about
#   0.1): the realised loss depends mostly on noise the model cannot see. On labels, which no claim
#   covers, the risk is clearly best (Spearman 0.38 against -0.07 for predictive entropy), because
#   there entropy mixes up disagreement between synonyms with disagreement between classes.
# - **More samples did not hurt (c5 holds).** The Bayes answer's loss fell with $N$ on both tasks.
# - **Cost.** The method draws $N = 20$ answers per prompt, four times the sequences of 5-beam search;
#   the measured seconds are m1 and m2 in the table (machine-dependent, small for this tiny model).
# - **The parser matters as much as the decision rule.** The selection effect of a strict parser is
#   invisible in the paper's framing, where parsing is a given; in a real system it deserves the same
#   care as the decoder.
#
# ## What we scaled down, and why the effect should survive it
#
# - **The model.** A 0.1M-parameter GPT-2 trained for 1,400 steps, still about 0.2 nats per token above
#   the noise floor of its data, instead of a pretrained LLM. Its belief is less sharp than a large
#   model's; the decision rules do not care about size, only about how the probability spreads.
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
# On a tiny language model and three synthetic tasks, deciding in latent space gave clearly better
# answers than greedy decoding and beam search where one answer has several spellings and the model's
# belief is sharp enough: on labels with synonyms those two never named the most probable class, and
# the latent mode was right 78% of the time. On sets the Bayes answer beat beam search, but mostly
# because 20 samples survive parse failures that a single decode does not; with a lenient parser
# greedy decoding was slightly better. The centroid beat the medoid on sets, with answers no sample
# contained. On ratings the median helped less than declared. The Bayesian risk was the best
# uncertainty score only on labels; on sets, length-driven scores ranked errors better, so the
# paper's uncertainty claim did not hold here.
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
