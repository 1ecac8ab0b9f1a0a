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
#
# **Throughput and a rate shift.** As in the paper's Tables 1 and 2 we also compare throughput with
# round robin's, and rerun the heuristics and the router (E2E weight, noisy predictions) on a second
# workload whose arrival rate rises by a factor 1.5 half-way through the arrival window (the paper
# shifts its rate from 0.4 to 0.6).

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
rate = None  # arrivals per step (Poisson)
arrival_steps = None  # steps during which requests arrive
n_workers = None  # decode workers G
noise = None  # relative noise of the noisy length predictions: 0.2 draws o_hat from U[0.8 o, 1.2 o]
drain = None  # extra steps after the last arrival; the horizon T is arrival_steps + drain
rate_shift = None  # the rate-shift workload's second-half rate, as a multiple of rate

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from replib import core
from replib.papers.bidprice_routing import experiment, task

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     rate=rate, arrival_steps=arrival_steps, n_workers=n_workers, noise=noise, drain=drain,
                     rate_shift=rate_shift)
ledger = core.Ledger("bidprice_routing", cfg.profile, cfg.seeds, parameters=vars(cfg))
cfg

# %% [markdown]
# ## Running every policy on the same requests
#
# For each seed we draw one workload (with exact predictions, and the same requests with noisy
# predictions) and run the eleven constant-rate variants on it, then draw the rate-shift workload
# and run the five variants marked `shift` on it. The table gives means over seeds (latencies in
# steps, `ttft_le_20` the share of requests with a first token within 20 steps, `throughput` the
# prompt and decode tokens of the requests completed within the arrival window per step of it,
# `ms_per_epoch` the router's wall-clock time per scheduling epoch).

# %%
rows, traces = experiment.run_experiment(cfg, progress=core.progress)
runs = pd.DataFrame(rows)
runs.groupby("variant", sort=False)[experiment.REPORTED_METRICS].mean().round(2)

# %% [markdown]
# ## Latency per policy

# %%
steady = runs[~runs["variant"].str.endswith(" shift")]
long_form = steady.melt(id_vars=["seed", "variant"], value_vars=["mean_e2e", "p95_e2e", "p99_e2e",
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
# *Figure 1. Mean, P95 and P99 end-to-end latency (left) and mean and P99 time to first token
# (right) per policy at the constant rate, in steps; bars are means over seeds, error bars the
# standard deviation.*

# %% [markdown]
# ## The trade-off that the weights steer

# %%
means = steady.groupby("variant", sort=False)[["mean_e2e", "p99_ttft"]].mean().reset_index()
means["family"] = means["variant"].map(lambda v: "olp router" if v.startswith("olp") else
                                       "central ablation" if v.startswith("central") else "heuristic")
fig, ax = plt.subplots(figsize=(7.5, 4))
sns.scatterplot(means, x="mean_e2e", y="p99_ttft", hue="variant", style="family", s=90, ax=ax,
                markers={"heuristic": "s", "central ablation": "^", "olp router": "o"})
ax.set(xlabel="mean e2e latency (steps)", ylabel="p99 ttft (steps)")
ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize="small")
plt.show()

# %% [markdown]
# *Figure 2. Mean end-to-end latency against P99 time to first token, means over seeds: squares are
# the heuristics that dispatch on arrival, triangles the price-free central-buffer ablations,
# circles the OLP router. Lower-left is better on both.*

# %% [markdown]
# The tail weight $w_{gp}$ adds a bonus for starting a request within $W_{gp} = 20$ steps of its
# arrival. The paper reports that raising it monotonically raises the share of requests served within
# its TTFT threshold. We sweep $w_{gp}$ between the two ends that claim c4a compares (0 and $T$, taken
# from the runs above) and plot, per seed, the change against $w_{gp} = 0$.

# %%
ends = runs[runs["variant"].isin(["olp beta", "olp beta + tail"])].assign(
    fraction=lambda d: (d["variant"] == "olp beta + tail").astype(float))
sweep = pd.concat([ends[["seed", "fraction", "ttft_le_20", "mean_e2e"]],
                   pd.DataFrame(experiment.tail_weight_sweep(cfg, progress=core.progress))])
sweep = sweep.sort_values(["seed", "fraction"])
fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
for ax, metric, label in [(axes[0], "ttft_le_20", "change in share with ttft <= 20"),
                          (axes[1], "mean_e2e", "change in mean e2e (steps)")]:
    change = sweep[metric] - sweep.groupby("seed")[metric].transform("first")
    sns.lineplot(sweep.assign(change=change), x="fraction", y="change", hue="seed", marker="o",
                 palette="pastel", ax=ax)
    ax.plot(*zip(*sweep.assign(change=change).groupby("fraction")["change"].mean().items()), "k-o", lw=2)
    ax.axhline(0, color="grey", lw=1)
    ax.set(xlabel="tail weight $w_{gp} / T$", ylabel=label)
plt.show()

# %% [markdown]
# *Figure 3. Change in the share of requests with a first token within 20 steps (left) and in mean
# end-to-end latency (right) against the tail weight, as a fraction of the horizon T, relative to no
# tail weight; OLP with the E2E weight, one line per seed, the mean in black.*

# %% [markdown]
# ## Throughput, and an arrival-rate shift
#
# The official code's window experiments count throughput as the tokens of the requests completed
# by the end of the arrival window, per unit of time; we do the same in steps (prompt plus decode
# tokens, window = the arrival steps). A policy that finishes requests sooner, or wastes less work on
# preemptions, delivers more of them inside the window. The rate-shift workload keeps the rate
# $\lambda$ for the first half of the window and raises it to $1.5\lambda$ for the second half.

# %%
shift_view = runs[runs["variant"].isin(["round_robin", "lor", "olp beta noisy", "round_robin shift",
                                        "lor shift", "olp beta shift"])]
shift_view.groupby("variant", sort=False)[["mean_e2e", "p95_e2e", "p99_e2e", "throughput",
                                           "preemptions"]].mean().round(2)

# %%
fig, ax = plt.subplots(figsize=(8, 3.4))
for name in ["round_robin shift", "lor shift", "olp beta shift"]:
    result = traces[name]
    steps = np.arange(1, result.steps + 1)
    arrived = np.searchsorted(result.arrival, steps, side="right")
    finished = np.searchsorted(np.sort(result.completion[result.completion > 0]), steps, side="right")
    ax.plot(steps, arrived - finished, lw=1, label=name.removesuffix(" shift"))
ax.axvline(cfg.arrival_steps // 2, color="grey", ls=":", lw=1)
ax.axvline(cfg.arrival_steps, color="grey", ls="--", lw=1)
ax.set(xlabel="step", ylabel="requests in the system")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 4. Requests in the system (arrived, not yet completed) per step on the rate-shift workload
# (first seed) for round robin, least outstanding requests and OLP with the E2E weight and noisy
# predictions; the dotted line marks the shift from the rate of the book setting to 1.5 times it,
# the dashed line the end of the arrival window.*

# %% [markdown]
# ## Inside the router: buffer, prices and KV memory

# %%
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

# %% [markdown]
# *Figure 5. One run (first seed) of OLP with the E2E weight. Top: requests waiting in the central
# buffer. Middle and bottom: per worker, the batch-slot and KV prices that a column starting at that
# step meets, averaged over the next 100 steps. Once the buffer empties near the end, no epoch fires
# and the prices stop changing.*

# %%
fig, axes = plt.subplots(2, 1, figsize=(8, 5), sharex=True, sharey=True)
for ax, name in zip(axes, ["lor", "olp beta"]):
    result = traces[name]
    ax.plot(result.kv, lw=0.8)
    ax.axhline(task.KV_CAPACITY, color="k", ls="--", lw=1)
    steps = [step for step, _ in result.preemptions]
    ax.plot(steps, np.full(len(steps), task.KV_CAPACITY * 1.03), "|", color="tab:red", ms=8)
    ax.set(ylabel=f"kv tokens ({name})")
axes[1].set(xlabel="step")
plt.show()

# %% [markdown]
# *Figure 6. KV tokens in use per worker over time (first seed) for least outstanding requests (top)
# and OLP with the E2E weight (bottom), with the capacity M as a dashed line; red ticks mark
# preemptions.*

# %% [markdown]
# ## The claims
#
# Each claim was declared in `chapter.yml` with its role and threshold before this experiment was
# run. The value of each is computed per seed from the runs above (ratios against the best heuristic
# of that seed; the throughput and rate-shift claims against round robin, as the paper's tables
# report them). A claim holds when the whole 95% interval of the mean over seeds clears the
# threshold, fails when the whole interval misses it, and is undecided when the interval contains it.

# %%
values = experiment.claim_values(runs)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# The verdicts use every seed; here are the per-seed values behind them.

# %%
pd.DataFrame(values).round(3)

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
# - **Scale.** 4 workers and about 450 requests per seed at the book profile (the `paper` profile
#   runs longer). The claims are means of per-seed ratios, whose standard deviations are 2 to 15%
#   (claims table): verdicts near a threshold could flip with other seeds.
# - **Throughput.** The drain lets every policy finish every request, so all deliver the same tokens
#   in the end; like the official code's window experiments, we count only the tokens of requests
#   completed within the arrival window. That window is 800 steps, only five to seven mean
#   latencies, so the requests still in the system at its end decide the differences.
# - **Rate shift.** The paper's shift 0.4 to 0.6 is a factor 1.5; where in the run it happens is not
#   stated, we take the midpoint of the arrival window. At $1.5 \times 0.55 \approx 0.83$ requests
#   per step the second half is above what four workers can serve, so queues grow until the window
#   ends.
# - **TTFT after a preemption.** A preempted request keeps the TTFT of its first attempt, although its
#   tokens are recomputed; this favours the heuristics, which preempt, so it makes our comparison
#   conservative.
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
ledger.report()

# %% [markdown]
# What the book-profile run (seeds 0, 1 and 2) shows, and why we think so. These bullets were
# written for that run; at other profiles or seeds, trust the tables above.
#
# - **The headline direction holds on the means, but not on every seed.** Mean end-to-end latency
#   and mean TTFT fall well below the best heuristic's (c1a, c2a), and the mean E2E gain survives
#   $\pm 20\%$ noise in the predicted lengths (c4b holds). The per-seed values vary: on seed 2 c1a is
#   above its threshold (0.87 against 0.85), so c1a is fragile. With
#   exact predictions the router never preempts (c2b, reported as a check: it holds by construction),
#   while every snapshot heuristic overflows KV caches and recomputes hundreds of requests (figure of
#   KV usage). With noisy predictions the router preempts too, and its P99 E2E is then worse than
#   every heuristic's: the noise costs the tail what it does not cost the mean.
# - **The tails are not where the router wins.** Its P99 E2E is about the best heuristic's (c1b is
#   fragile: the mean clears 1.05, seed 1 at 1.11 does not), and the price-free central FCFS ablation has a better P99 E2E and P99 TTFT than the
#   router: ordering requests by length, as the E2E weight does, makes long requests wait.
# - **Most of the gain is central buffering and shortest-job ordering, not the prices (c5 fails).**
#   Central FCFS, which uses the same exact feasibility check and the same scoring budget, already
#   removes the preemptions and much of the latency; central SJF matches the router on mean E2E and
#   mean TTFT within noise, at a small fraction of its decision time. With the E2E weight the
#   margin ranks requests mostly by the reward $\beta(T - \tau - \hat o + 1)/T$, which is
#   shortest-job-first; the learnt prices add nothing measurable on top at this load. The paper
#   reports no such ablation, so this is a question it leaves open, not a contradiction of it.
# - **The throughput weight costs mean latency (c3a holds).** $\alpha$ rewards long jobs, as
#   predicted; but its rewards are also much smaller ($\hat o / T \le 0.17$ against about 0.5 to 1
#   for $\beta$), so the $\alpha$ router also admits less eagerly against the same prices (its mean
#   TTFT is several times higher). Both effects raise its latency; this run cannot separate them.
# - **The TTFT weight cannot reorder waiting requests (c3b, now a check).** Before this revision
#   c3b claimed that the TTFT weight lowers P99 TTFT by 10% against the E2E weight; it failed (mean
#   ratio 1.05; seeds 1.04, 0.89 and 1.21). It could not hold as posed: in every epoch the router
#   scores all waiting requests at the same start step $\tau = k$, so $\gamma\,(T - \tau + 1)$, the
#   official code's TTFT term, gives every candidate the *same* reward (check c3b: its spread within
#   an epoch is 0 on every seed). The weight only raises the level of every reward against the
#   prices; the order comes from the column costs, which still favour short requests, so the
#   $\gamma$ router behaves much like the $\beta$ router (mean E2E 108.8 against 110.1 steps). The
#   old ratio is kept as measurement m3b (1.05 ± 0.16, unchanged). A TTFT objective that favours old
#   requests needs a term in $\tau - t_j$, such as the tail indicator.
# - **The tail weight's effect is inconclusive (c4a fails).** The share of requests with TTFT
#   $\le 20$ steps rises on average, by less than the declared three points, and the per-seed changes
#   range from nothing to several points. Two details of the reward limit the weight: the normalised
#   reward is capped, so $\min(r/\bar R, 1)$ with $\bar R = T$ lets the bonus lift a reward only by
#   the gap $1 - \tilde r$, and beyond about $w_{gp} = T/2$ a larger weight changes little; and the
#   indicator $\mathbb 1\{\tau - t_j < W_{gp}\}$ with $W_{gp} = 20$ rewards a TTFT of at most 19
#   steps, one step stricter than the metric (we kept the code's strict inequality and the digest's
#   window).
# - **Throughput gains far more than the paper's +0.90% (c6 holds: 1.13 ± 0.07 against round
#   robin; seeds 1.09, 1.21, 1.08), and most of it is again central buffering.** Our throughput is the
#   code's window measure: tokens of the requests completed within the 800 arrival steps. With mean
#   latencies of 110 to 175 steps, the requests still in the system when the window closes (by
#   Little's law about $\lambda$ times the mean E2E: some 60 for the router, 95 for round robin) are a
#   large share of all, so this throughput partly re-measures mean latency; the heuristics also
#   preempt 295 to 335 times each. The price-free ablations deliver nearly as much or
#   more (central FCFS 77.6, central SJF 81.1, the router 80.3 with exact and 80.6 with noisy
#   predictions, round robin 71.7 tokens per step). We do not know the window and the latencies
#   behind the paper's number; where a window is long against the latencies, window throughput stays
#   near the arrival rate for every policy and gains are small, like the paper's. Ours is only five
#   to seven mean latencies long, so the two numbers are not comparable in size.
# - **Under the rate shift the router keeps the paper's mean-latency gain on the mean but not on
#   every seed (c7a fragile), and its throughput gain grows (c7b holds).** With the rate raised
#   1.5-fold half-way through the window, mean E2E is 0.544 ± 0.023 of round robin's (seeds 0.521,
#   0.545, 0.566, against at most 0.552 from the paper's 44.81%): seed 2 falls 1.4 points short. The
#   router delivers 1.22 ± 0.06 times round robin's throughput (seeds 1.19, 1.29, 1.19; the paper
#   +1.93%). Every heuristic stays at 72 to 73 tokens per step, no more than at the constant rate,
#   because it preempts 410 to 450 times, while the router reaches 89.0 despite 302 preemptions
#   from its noisy predictions; its backlog grows less than half as fast (first seed, figure of
#   requests in the system). The tail goes the other way, and we did not declare it as a claim: the
#   router's P99 E2E under the shift is 848 steps against round robin's 687 (the paper: 31.15% below
#   round robin). Under overload the E2E weight's shortest-job order makes the longest requests wait
#   until the backlog clears.
# - **Decision time** is of the order of 1 to 2 ms per scheduling epoch in numpy, for four workers
#   and up to 64 scored requests, the order of the paper's 1 to 2 ms (the claims table gives this
#   run's value; across our runs on a shared machine its mean moved between 1.4 and 2.0 ms). The
#   units differ: an epoch decides for every waiting request at once, the paper reports time per
#   decision. Not judged: it depends on the machine.
#
# ## Summary
#
# In a small continuous-batching simulator the OLP bid-price router beats round robin, random,
# least-outstanding-requests and power-of-two routing on mean latency, mean TTFT and throughput, and
# never preempts when predictions are exact; it does not win on the tails. Under a 1.5-fold rise of
# the arrival rate it keeps a mean-latency gain close to the paper's (on two seeds of three) and its
# throughput gain grows, but its P99 latency is worse than round robin's. Two price-free ablations
# show where the gains come from: a central buffer with exact KV reservations, and shortest-job
# ordering, which the E2E weight reproduces. The reward weights steer the router less than the paper
# suggests: the throughput weight raises mean latency as expected, the TTFT weight cannot reorder
# waiting requests, and the tail weight's effect is small and inconclusive over three seeds. Re-run at
# other
# settings with, for example,
# `replib run bidprice_routing --profile book -p rate=0.45 --seeds 3 4 5`.
#
# ## Exercises
#
# 1. Lower the load (`rate = 0.4`). Which claims still hold? Is the gain over the heuristics mostly
#    a high-load effect?
# 2. Raise the noise of the length predictions to 0.5. When do the OLP router's reservations start
#    to cause preemptions, and what happens to claim c4b?
# 3. The paper does not ablate its components. Using `task.run_policy`, turn off the backlog slack
#    (`varsigma=0`, which removes both the negative admission threshold and the price halving) and
#    the backlog gain (`kappa=0`), and measure what each contributes.
# 4. Lengthen the arrival window (`arrival_steps = 3000`). How do the throughput ratios c6 and c7b
#    change, and why does the length of the window matter to them?
