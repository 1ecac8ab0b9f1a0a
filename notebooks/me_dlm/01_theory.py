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
# # Edit refinement for masked diffusion LMs: theory
#
# **Learning goals.** After this notebook you can
#
# 1. explain why committing many tokens of a masked diffusion LM (a language model that starts from
#    an all-masked answer and, at each forward pass, fills in some of the masked positions) in one
#    pass breaks answers whose positions depend on each other;
# 2. compute a canonical minimal edit script from the Levenshtein table (the table of edit
#    distances between all prefixes of two sequences) and turn it into the labels of the two heads
#    (token head: keep, replace, delete; insertion head: the first token to insert before each
#    position);
# 3. apply one edit pass and say when a single pass reaches the target;
# 4. name the corner cases of the released label builder with repeated tokens, and measure them.
#
# **Sources.** Ren et al., "ME-DLM: Edit-Based Refinement for Parallel Masked Diffusion Language
# Models", ICML 2026 ([arXiv 2605.09603](https://arxiv.org/abs/2605.09603)). Only the abstract and the
# opening of the introduction could be read; the official code decided the method (draft, edit
# passes, edit-label builder). The toy, the model size and every budget are ours ("Sources in detail"
# at the end).

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

from replib import core
from replib.papers.me_dlm import method, theory

core.set_style()
profile = core.resolve_profile(profile)
n_pairs = {"smoke": 2000, "book": 10000, "paper": 20000}[profile]

# %% [markdown]
# ## Marginals are not the joint
#
# A masked diffusion LM learns, for each masked position $i$ of a partly masked sequence $x_t$, the
# marginal $p_\theta(x_i \mid x_t)$: the distribution of that one position, whatever the others are.
# Committing a set $\mathcal S$ of positions in one pass samples them independently, as if
# $p(x_{\mathcal S} \mid x_t) = \prod_{i \in \mathcal S} p(x_i \mid x_t)$. The introduction's example: a model
# trained on "2+2=4", "2+3=5" and "3+2=5" with equal weight.

# %%
ex = theory.marginal_vs_joint_example()
for i, m in enumerate(ex["marginals"]):
    print(f"position {i}: " + ", ".join(f"'{c}' {p:.2f}" for c, p in m.items()))
print(f"P(valid) when every position is sampled independently: {ex['p_valid_independent']:.3f} (= 12/27)")
print(f"greedy parallel decoding writes '{ex['greedy_parallel']}', valid: {ex['greedy_valid']}")
assert abs(ex["p_valid_independent"] - 12 / 27) < 1e-12

# %% [markdown]
# One token per pass, each conditioned on the tokens already written, is always valid here; all tokens
# in one pass is valid less than half the time. ME-DLM keeps the fast parallel draft and repairs it
# afterwards with a few edit passes of the same network.
#
# ## The edit model
#
# The network is a bidirectional transformer (every position attends to every other, before and
# after it) with two heads on each position's last hidden state: a token head
# $p^{\text{cur}}(\cdot \mid i)$, which may also predict the new token `<del>`, and an insertion head
# $p^{\text{nxt}}(\cdot \mid i)$. One edit pass (phase B of the official inference; phase A is the
# parallel draft):
#
# 1. one forward pass; $r_i = \arg\max p^{\text{cur}}(\cdot \mid i)$, and $g_i = \arg\max p^{\text{nxt}}(\cdot \mid i - 1)$,
#    the insertion head of the *previous* position, as the proposal for the gap before position $i$;
# 2. delete every position with $r_i = $ `<del>`;
# 3. replace every kept position by $r_i$, all in parallel;
# 4. insert $g_i$ before $r_i$ where $g_i \neq r_i$: "no insertion" is not a token, it is the insertion
#    head agreeing with the token head, so at most one token is inserted per gap and pass.
#
# ## Labels from a canonical minimal edit script
#
# Training needs one target per head and position. The official builder computes the Levenshtein
# table $D_{i,j} = \min\{D_{i-1,j-1} + [\tilde y_i \neq y^*_j],\ D_{i-1,j} + 1,\ D_{i,j-1} + 1\}$ between the draft
# $\tilde y$ and the clean answer $y^*$, and backtraces with the fixed priority KEEP > REPLACE > DELETE >
# INSERT, so the script, and therefore the labels, are unique. Worked examples (letters for tokens):

# %%
for item in theory.worked_edit_examples():
    ops = " ".join(f"{op}({tok})" if tok is not None else op for op, _, tok in item["script"] if op != "keep")
    print(f"{item['draft']:>6} -> {item['target']:<6} distance {item['distance']}: {ops:24s} "
          f"after one pass '{item['after_one_pass']}', passes to the target: {item['passes_to_target']}")

# %% [markdown]
# A replacement, a deletion and a single insertion are each repaired in one pass. Two insertions in the
# same gap ("ab" to "axyb") need two passes, because only the first inserted token of a gap becomes a
# label. The last line is a corner case of the released builder: inserting a copy of a token right
# before that same token is unrepresentable ($g = r$ means "no insertion"), so the builder shifts such
# an insertion label one gap to the right, but it does not check gap 0; there "cb" to "ccb" is labelled
# as no change, and the oracle pass (one pass that applies the labels themselves, as a perfect edit
# model would) is stuck.
#
# ## How often is the oracle stuck?
#
# Apply the oracle labels to random (draft, target) pairs (5 token types, lengths up to 12, up to 6
# random edits) and count the pairs at positive distance where one pass does not reduce the distance,
# with the release rule and with gap 0 also checked:

# %%
release = theory.oracle_stuck_rate(n_pairs=n_pairs, check_gap0=False, seed=0)
fixed = theory.oracle_stuck_rate(n_pairs=n_pairs, check_gap0=True, seed=0)
print(f"oracle pass does not reduce the distance: release rule {release:.2%}, gap 0 also checked {fixed:.2%} "
      f"({n_pairs:,} pairs)")

# %% [markdown]
# The rate depends on how the pairs are drawn. The experiment keeps the release rule, as the
# official code does: a stuck label only means that a later pass must do the work. It is rare, but on
# a small vocabulary with many repeated tokens it is not negligible.
#
# ## Counting forward passes
#
# The draft commits $L$ masked positions in $S$ passes, $\lfloor L/S \rfloor + 1$ tokens in the first $L \bmod S$
# passes and $\lfloor L/S \rfloor$ in the others; then $E$ edit passes follow. The release drafts 512 tokens
# in 48 passes and edits 16 times: $48 + 16 = 64 = 512 / 8$ forward passes, the abstract's "one eighth of
# the diffusion steps".

# %%
schedule = method.step_schedule(512, 48)
print(f"512 tokens in 48 passes: {schedule.count(11)} passes of 11 and {schedule.count(10)} of 10; "
      f"with 16 edit passes {len(schedule) + 16} forward passes")
assert sum(schedule) == 512 and len(schedule) + 16 == 512 // 8

# %% [markdown]
# ## What to expect in the experiment
#
# - A plain masked diffusion LM should lose most of its validity when it commits the whole answer in
#   one pass, on a toy whose valid answers differ in content and length.
# - Two edit passes should repair a good part of a one-pass draft.
# - At an *equal* number of forward passes it is not clear that editing beats simply unmasking more
#   slowly: on a tiny toy, an extra unmasking pass is cheap and very effective. A pilot run while
#   planning this chapter found no advantage; the experiment tests it as a falsification test.
# - Whether edits *could* win is measured separately: the experiment replays ME-DLM's drafts with
#   the oracle pass of this notebook (the labels themselves as proposals). If two oracle passes beat
#   slower unmasking, the toy leaves edits room, and a loss of the learned edit heads is about them,
#   not about the canvas.
#
# ## Summary
#
# Parallel decoding samples positions from their marginals and so mixes modes of the answer
# distribution. ME-DLM repairs a parallel draft with edit passes of a two-head bidirectional model:
# the token head keeps, replaces or deletes each token and the insertion head proposes one token for
# the gap before it. Its labels come from a canonical minimal edit script, which makes them unique, and
# whose handling of repeated tokens has a measurable corner case.
#
# ## Exercises
#
# 1. Fill in the Levenshtein table for "abcd" and "abxcd" by hand and trace back the script.
# 2. Why can one pass not insert two tokens into the same gap? Loop `method.edit_labels` and
#    `method.apply_edits` (as `worked_edit_examples` does) to count the passes needed for "ab" to "awxyzb".
# 3. Show that checking gap 0 in the equal-neighbour shift fixes "cb" to "ccb". Can a shift to the right
#    ever break a label that was correct?
#
# ## Sources in detail
#
# Ren, Zhan, Lu, Wang, Yang, Hou, Pan and Li, "ME-DLM: Edit-Based Refinement for Parallel Masked
# Diffusion Language Models", ICML 2026 ([arXiv 2605.09603](https://arxiv.org/abs/2605.09603)), with
# official code ([renhouxing/ME-DLM](https://github.com/renhouxing/ME-DLM)). **Only the abstract and
# the opening of the introduction could be read**; the method follows the official code (draft, edit
# passes, edit-label builder), which is exact for what the released system does. The toy task, the
# model size and all budgets are our choices.
