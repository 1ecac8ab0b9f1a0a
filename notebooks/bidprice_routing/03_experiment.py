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
# # Bid-price routing for LLM serving: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. say which of the paper's claims about the OLP router hold in a small serving simulator, and by
#    how much;
# 2. separate the gain of the dual prices from the gain of central buffering and shortest-job ordering;
# 3. re-run the experiment at another load, scale or seed set from the `parameters` cell.
#
# **Setting.** $G = 4$ decode workers, each with at most $B = 16$ running requests and $M = 2048$ KV
# tokens; Poisson arrivals at $\lambda = 0.55$ requests per step for 800 steps (book profile), then a
# drain; heavy-tailed prompt and decode lengths. At this load both batch slots and KV memory bind.
# Every policy sees the same requests for a given seed. Latencies are in steps (decode iterations).
#
# **Policies.** Four heuristics that dispatch on arrival (round robin, random, least outstanding
# requests, power of two choices), two price-free central-buffer ablations (first-come-first-served
# and shortest predicted job first, both with the router's exact feasibility check), and the OLP
# bid-price router with the E2E weight ($\beta = 1$), the throughput weight ($\alpha = 1$), the TTFT
# weight ($\gamma = 1$), the E2E weight plus the tail weight $w_{gp} = T$, and the E2E weight with noisy
# length predictions $\hat o \sim U(0.8\,o, 1.2\,o)$.

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
rate = None  # arrivals per step (Poisson)
arrival_steps = None  # steps during which requests arrive
n_workers = None  # decode workers G
noise = None  # relative noise of the noisy length predictions: 0.2 draws o_hat from U[0.8 o, 1.2 o]
drain = None  # extra steps after the last arrival; the horizon T is arrival_steps + drain

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from replib import core
from replib.papers import bidprice_routing as bp

core.set_style()
cfg = core.configure(bp.EXPERIMENT_PROFILES, profile, seeds=seeds, rate=rate, arrival_steps=arrival_steps,
                     n_workers=n_workers, noise=noise, drain=drain)
ledger = core.Ledger("bidprice_routing", cfg.profile, cfg.seeds, parameters=vars(cfg))
cfg

# %% [markdown]
# ## Running every policy on the same requests
#
# For each seed we draw one workload (with exact predictions, and the same requests with noisy
# predictions) and run the eleven variants on it. The table gives means over seeds (latencies in
# steps, `ttft_le_20` the share of requests with a first token within 20 steps, `ms_per_epoch` the
# router's wall-clock time per scheduling epoch).

# %%
rows, traces = bp.run_experiment(cfg, progress=core.progress)
runs = pd.DataFrame(rows)
runs.groupby("variant", sort=False)[bp.REPORTED_METRICS].mean().round(2)

# %% [markdown]
# ## Latency per policy

# %% mystnb={"figure": {"caption": "Mean, P95 and P99 end-to-end latency (left) and mean and P99 time to first token (right) per policy, in steps; bars are means over seeds, error bars the standard deviation.", "name": "bidprice-latency"}}
long_form = runs.melt(id_vars=["seed", "variant"], value_vars=["mean_e2e", "p95_e2e", "p99_e2e",
                                                              "mean_ttft", "p99_ttft"])
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
for ax, metrics in zip(axes, [["mean_e2e", "p95_e2e", "p99_e2e"], ["mean_ttft", "p99_ttft"]]):
    sns.barplot(long_form[long_form["variable"].isin(metrics)], y="variant", x="value", hue="variable",
                errorbar="sd", ax=ax, orient="h")
    ax.set(xlabel="latency (steps)", ylabel="")
    ax.legend(title="", fontsize="small")
axes[1].set(yticklabels=[])
plt.show()

# %% [markdown]
# ## The trade-off that the weights steer

# %% mystnb={"figure": {"caption": "Mean end-to-end latency against P99 time to first token (means over seeds). Lower-left is better on both.", "name": "bidprice-pareto"}}
means = runs.groupby("variant", sort=False)[["mean_e2e", "p99_ttft"]].mean()
fig, ax = plt.subplots(figsize=(6.4, 4))
for variant, row in means.iterrows():
    marker = "o" if variant.startswith("olp") else "s"
    ax.scatter(row["mean_e2e"], row["p99_ttft"], marker=marker, s=50)
    ax.annotate(variant, (row["mean_e2e"], row["p99_ttft"]), xytext=(4, 3), textcoords="offset points",
                fontsize="small")
ax.set(xscale="log", yscale="log", xlabel="mean e2e latency (steps)", ylabel="p99 ttft (steps)")
plt.show()

# %% [markdown]
# The tail weight $w_{gp}$ adds a bonus for starting a request within $W_{gp} = 20$ steps of its
# arrival. The paper reports that raising it monotonically raises the share of requests served within
# the TTFT threshold; here is the same sweep (claim c4a compares the two ends).

# %% mystnb={"figure": {"caption": "Share of requests with a first token within 20 steps of arrival (left) and mean end-to-end latency (right) against the tail weight, as a fraction of the horizon T; OLP with the E2E weight, mean over seeds with the standard deviation as a band.", "name": "bidprice-tail"}}
sweep = pd.DataFrame(bp.tail_weight_sweep(cfg, progress=core.progress))
fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
sns.lineplot(sweep, x="fraction", y="ttft_le_20", errorbar="sd", marker="o", ax=axes[0])
sns.lineplot(sweep, x="fraction", y="mean_e2e", errorbar="sd", marker="o", ax=axes[1])
axes[0].set(xlabel="tail weight $w_{gp} / T$", ylabel="share with ttft <= 20")
axes[1].set(xlabel="tail weight $w_{gp} / T$", ylabel="mean e2e latency (steps)")
plt.show()

# %% [markdown]
# ## Inside the router: buffer, prices and KV memory

# %% mystnb={"figure": {"caption": "One run (first seed) of OLP with the E2E weight. Top: requests waiting in the central buffer. Bottom: the batch-slot and KV prices averaged over the remaining horizon, per worker.", "name": "bidprice-prices"}}
olp = traces["olp beta"]
fig, axes = plt.subplots(3, 1, figsize=(8, 6), sharex=True)
axes[0].plot(olp.buffer_len, color="k", lw=1)
axes[0].set(ylabel="buffer length")
for g in range(olp.price_B.shape[1]):
    axes[1].plot(olp.price_B[:, g], lw=1, label=f"worker {g}")
    axes[2].plot(olp.price_M[:, g], lw=1)
axes[1].set(ylabel="mean $p^B$")
axes[2].set(ylabel="mean $p^M$", xlabel="step")
axes[1].legend(ncol=4, fontsize="small")
plt.show()

# %% mystnb={"figure": {"caption": "KV tokens in use per worker over time (first seed) for least outstanding requests (top) and OLP with the E2E weight (bottom), with the capacity M as a dashed line; red ticks mark preemptions.", "name": "bidprice-kv"}}
fig, axes = plt.subplots(2, 1, figsize=(8, 5), sharex=True, sharey=True)
for ax, name in zip(axes, ["lor", "olp beta"]):
    result = traces[name]
    ax.plot(result.kv, lw=0.8)
    ax.axhline(bp.KV_CAPACITY, color="k", ls="--", lw=1)
    steps = [step for step, _ in result.preemptions]
    ax.plot(steps, np.full(len(steps), bp.KV_CAPACITY * 1.03), "|", color="tab:red", ms=8)
    ax.set(ylabel=f"kv tokens ({name})")
axes[1].set(xlabel="step")
plt.show()

# %% [markdown]
# ## The claims
#
# Each claim was declared in `chapter.yml` with its threshold before this experiment was run. The
# value of each is computed per seed from the runs above (ratios against the best heuristic of that
# seed), and the verdict compares the mean over seeds with the threshold.

# %%
for seed, values in bp.claim_values(runs).items():
    for claim_id, value in values.items():
        ledger.record(claim_id, seed, value)
ledger.save()
ledger.table()

# %% [markdown]
# The router's decision time is measured in wall-clock milliseconds per scheduling epoch, in numpy on
# one CPU core; the paper reports about 1 to 2 ms per decision. This number depends on the machine,
# so it is reported, not judged.

# %%
runs.groupby("variant", sort=False)["ms_per_epoch"].mean().dropna().round(2).to_frame("ms per epoch")

# %% [markdown]
# ## What we scaled down, and why the effect should survive it
#
# - **Simulator.** The paper uses Vidur, which models prefill, batch-size-dependent iteration time and
#   GPU kernels on A100s; we step every worker one decode iteration at a time and ignore prefill
#   cost. The mechanism under test, reserving a request's future KV growth and pricing it, does not
#   depend on kernel times; what changes is how much a preemption costs in wall-clock time.
# - **Workload.** Synthetic log-normal lengths instead of LMSYS-Chat traces; the paper's rates
#   (0.4, 0.5) are in units we could not verify, so we chose a load at which batch slots and KV memory
#   both bind. Our numbers are directional evidence, not a reproduction of the paper's percentages.
# - **Scale.** 4 workers and about 440 requests per seed at the book profile (the `paper` profile
#   runs longer). Ratios of means over 3 seeds carry sampling noise of a few percent: the standard
#   deviations in the claims table say how much.
# - **Reward normaliser.** $\bar R = T$ rather than the code's default of 1, with which nearly every
#   reward saturates and the weights stop mattering.
# - **Ablations the paper does not report.** The central-buffer FCFS and SJF policies share the
#   router's exact feasibility check but set no prices. Claim c5 compares against SJF: if it fails,
#   the gain over the heuristics comes mainly from buffering with exact reservations and from
#   shortest-job ordering, not from the learnt prices.
#
# ## Reading the verdicts
#
# The sentences below are generated from the claims table, so they always match this run.

# %%
for row in ledger.judged():
    print(f"{row['id']:<18} {row['verdict']:<26} mean {row['mean']:.3g} (declared {row['direction']} "
          f"{row['threshold']}): {row['statement']}")

# %% [markdown]
# What the book-profile run (seeds 0, 1 and 2) shows, and why we think so:
#
# - **The headline direction holds.** With exact length predictions the router's reservations are
#   exact: it never preempts, while every snapshot heuristic overflows KV caches and recomputes
#   hundreds of requests (figure of KV usage). Mean end-to-end latency and mean TTFT fall well below
#   the best heuristic, and the gain survives $\pm 20\%$ noise in the predicted lengths (c1a, c2a,
#   c2b, c4b). The P99 end-to-end latency is about the same as the best heuristic's (c1b): long
#   requests wait behind short ones, so the tail gains little.
# - **Most of the gain is central buffering and shortest-job ordering, not the prices (c5).** The
#   price-free central FCFS ablation, which uses the same exact feasibility check, already removes
#   the preemptions and much of the latency, and central SJF matches the OLP router on mean E2E
#   within noise. With the E2E weight the bid-price margin ranks requests mostly by their reward
#   $\beta(T - \tau - \hat o + 1)/T$, i.e. shortest job first; the prices add little on top at this load.
#   The paper reports no such ablation, so this is a question it leaves open, not a contradiction.
# - **The throughput weight costs mean latency, as predicted (c3a).** $\alpha$ rewards long jobs,
#   so mean E2E rises by more than 5% against the E2E weight.
# - **The TTFT weight does not lower tail TTFT (c3b fails).** In every epoch the router scores all
#   waiting requests at the same start step $\tau = k$, so $\gamma\,(T - \tau + 1)$ adds the *same*
#   amount to every candidate's reward: it makes the router more willing to admit, but cannot reorder
#   requests by how long they have waited. Only the price of their columns separates them, which is
#   again shortest-job-first. A TTFT objective that favours old requests needs a term in
#   $\tau - t_j$, such as the tail indicator.
# - **The tail weight helps, but less than declared (c4a fails).** Raising $w_{gp}$ raises the share
#   of requests with TTFT $\le 20$ steps, as the paper says, but by about two points,
#   not three, and the sweep flattens out from $w_{gp} = T/2$ on. The normalised reward is capped:
#   $\min(r/\bar R, 1)$ with $\bar R = T$ lets the bonus lift a request's reward only up to 1, by
#   $1 - \tilde r$, and once $w_{gp}$ fills that gap a larger weight changes nothing. The bonus also
#   cannot help a request that has already waited $W_{gp}$ steps.
# - **Decision time** is about a millisecond per epoch in numpy for four workers and up to 64 scored
#   requests, in line with the paper's 1 to 2 ms (not judged: it depends on the machine).
#
# ## Summary
#
# In a small continuous-batching simulator the OLP bid-price router beats round robin, random,
# least-outstanding-requests and power-of-two routing on mean latency and TTFT and never preempts
# when predictions are exact. Two price-free ablations show where the gain comes from: a central
# buffer with exact KV reservations, and shortest-job ordering, which the E2E weight reproduces. The
# reward weights steer the router less than the paper suggests: the throughput weight behaves as
# predicted, the TTFT weight cannot reorder requests, and the tail weight's effect is capped by the
# reward normalisation. Re-run at other settings with, for example,
# `replib run bidprice_routing --profile book -p rate=0.45 --seeds 3 4 5`.
#
# ## Exercises
#
# 1. Lower the load (`rate = 0.4`). Which claims still hold? Is the gain over the heuristics mostly
#    a high-load effect?
# 2. Raise the noise of the length predictions to 0.5. When do the OLP router's reservations start
#    to cause preemptions, and what happens to claim c4b?
# 3. The paper does not ablate its components. Using `bp.run_policy`, turn off the anti-starvation
#    rule (`varsigma=0`) and the backlog gain (`kappa=0`) and measure what each contributes.
