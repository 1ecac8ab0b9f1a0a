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
noise = None  # relative noise of the noisy length predictions (0.2 = U(0.8 o, 1.2 o))
drain = None  # extra steps after the last arrival; the horizon is T = arrival_steps + drain

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
# ## Summary
#
# The verdicts are in the claims table above and on the book's scoreboard; the chapter's conclusions
# are those the table supports. Re-run at other settings with, for example,
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
