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
# # Edit refinement for masked diffusion LMs: implementation
#
# This notebook builds ME-DLM from `replib.papers.me_dlm` (the toy in its `task` module, the method
# in its `method` module, the oracle-edit headroom arm in its `baselines` module) and the shared two-head bidirectional transformer
# `replib.models.masked_lm.TwoHeadMLM`, each piece next to the step of the official code it
# implements, and checked on small inputs. ME-DLM starts from a masked diffusion language model
# (MDLM: the answer starts fully masked and each forward pass fills in some masked positions) and
# adds edit passes that replace, delete and insert tokens of a finished draft.
#
# **Learning goals.** After this notebook you can
#
# 1. set up a toy whose valid answers depend on each other across positions;
# 2. run the parallel draft (phase A) with its confidence order and pass schedule;
# 3. build the edit labels of a draft and apply an edit pass (phase B), including its
#    substitution-only ablation;
# 4. describe the two training modes: plain masked diffusion and on-policy edit training (on the
#    model's own current drafts, not on drafts made in advance).

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
from replib.models.masked_lm import TwoHeadMLM
from replib.papers.me_dlm import exercises, method, task

core.set_style()
profile = core.resolve_profile(profile)  # checked only: this notebook runs the same at every profile
torch.set_num_threads(1)

# %% [markdown]
# ## 1. One prompt, three valid answers
#
# The prompt is a string of 2 or 3 digits; a valid answer is its reverse, its sorted digits, or every
# digit doubled. The training answer is one of the three at random. The answers share positions but
# differ in content and length, so the per-position marginals mix them, like "2+2=5".

# %%
prompt = (3, 1, 2)
for answer in task.valid_answers(prompt):
    print("".join(map(str, answer)))
assert task.is_valid(prompt, (2, 1, 3)) and not task.is_valid(prompt, (2, 1, 2))
assert task.nearest_valid_distance(prompt, (2, 1, 2)) == 1

# %% [markdown]
# A sequence is the prompt (left-padded to 3), `SEP` and a 7-slot response canvas: the answer, `<eos>`
# and `<pad>` up to the canvas. Padding is part of what the model learns, so the length is learned too.

# %%
ids = method.encode_prompts([prompt])
canvas = method.clean_canvas([(1, 2, 3)])
print(" ".join(task.detok(np.concatenate([ids[0], canvas[0]]))))
assert ids.shape[1] + canvas.shape[1] == method.SEQ_LEN

# %% [markdown]
# ## 2. The network: a bidirectional transformer with two heads
#
# A BERT-style encoder (a transformer in which every position attends to every other, as in BERT; a
# `transformers` configuration with random weights; no causal mask) with a token head and an
# insertion head on every position. The insertion head starts as a copy of the token head,
# as in the release.

# %%
model = TwoHeadMLM(method.VOCAB, n_layer=3, n_embd=64, n_head=4, max_len=method.SEQ_LEN, seed=0)  # the book size
x = torch.as_tensor(np.concatenate([ids, canvas], 1))
cur, nxt = model(x)
print(f"{sum(p.numel() for p in model.parameters()):,} parameters; logits {tuple(cur.shape)} from each head")
assert torch.allclose(cur, nxt)

# %% [markdown]
# The experiment builds the same network with `method.new_model`, whose forward pass is the BERT
# encoder's written out in a few tensor operations (fused attention with the padding mask, the GELU
# feed-forward, LayerNorms): the same function and weights, 10-25% less CPU per training step at this
# size, because the library's per-call machinery dominates a 7-token canvas.

# %%
from types import SimpleNamespace

fast = method.new_model(SimpleNamespace(n_layer=3, n_embd=64, n_head=4), seed=0)
fast.load_state_dict(model.state_dict())
assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(fast(x), model(x)))

# %% [markdown]
# ## 3. Phase A: the parallel draft
#
# The canvas starts fully masked. Each forward pass predicts every masked position (never `<del>`),
# and commits the $n_s$ most confident ones; confidence is computed with `<pad>` also forbidden, so
# positions that want padding are committed last. With $L = 7$ positions and $S$ passes the schedule
# gives $\lfloor L/S \rfloor + 1$ tokens in the first $L \bmod S$ passes and $\lfloor L/S \rfloor$ after. At the end
# `<pad>` is deleted and the last token becomes `<eos>`.

# %%
core.show_source(method.draft)

# %%
for S in (1, 3, 7):
    print(f"S = {S:2d}: tokens per pass {method.step_schedule(method.CANVAS, S)}")
out = method.draft(model, [prompt, (5, 0, 7)], S=3)
print("untrained drafts:", [" ".join(task.detok(r)) for r in out["responses"]])
assert out["forward_passes"] == 3 and all(r[-1] == method.EOS and method.PAD not in r for r in out["responses"])

# %% [markdown]
# ## 4. Phase B: labels and one edit pass
#
# The labels of a draft come from the canonical minimal edit script against the clean answer (theory
# notebook); `apply_edits` is the inference update. `edit_labels` takes the draft *without* its final
# `<eos>`, so for n draft tokens it returns n + 1 token labels (the last one is that `<eos>`) and
# n + 1 gap labels. A gap right after a deleted position stays unlabelled ("ignored"): at inference
# its proposal is dropped together with the deleted token. Applying the *oracle* labels once repairs
# a draft whose every gap needs at most one insertion. Training builds the labels of a whole batch at
# once with `edit_labels_batch`, the same rules vectorised over the rows (same result, checked here on
# random pairs):

# %%
draft_tokens = [2, 2, 9, 3]  # for the prompt (3, 1, 2), close to the valid "213"
rng_pairs = np.random.default_rng(1)
target = [2, 1, 3]
token_labels, gap_labels = method.edit_labels(draft_tokens, target)
def show(labels):
    return " ".join("(ignored)" if t == method.IGNORE else task.detok([t])[0] for t in labels)


print("token labels:", show(token_labels))
print("gap labels:  ", show(gap_labels), " (gap k: the slot before draft position k)")
after = method.apply_edits(draft_tokens + [method.EOS], token_labels, gap_labels)
print("after one oracle pass:", " ".join(task.detok(after)))
assert after == target + [method.EOS]
pairs = [([int(v) for v in rng_pairs.integers(0, 3, size=rng_pairs.integers(0, 7))],
          [int(v) for v in rng_pairs.integers(0, 3, size=rng_pairs.integers(0, 7))]) for _ in range(200)]
tokens_batch, gaps_batch = method.edit_labels_batch([d for d, _ in pairs], [t for _, t in pairs])
for row, (d, t) in enumerate(pairs):
    r, g = method.edit_labels(d, t)
    assert list(tokens_batch[row, :len(r)]) == r and list(gaps_batch[row, :len(g)]) == g

# %% [markdown]
# With the model, `edit_passes` runs the release's phase B: $r$ from the token head, $g$ from the
# insertion head of the previous position, all edits in parallel, convergence when nothing changes.
# The substitution-only ablation applies the replacements and nothing else, so lengths never change.

# %%
drafts = method.draft(model, [prompt, (5, 0, 7)], S=1)["responses"]
full = method.edit_passes(model, [prompt, (5, 0, 7)], drafts, E=2)
substitution = method.edit_passes(model, [prompt, (5, 0, 7)], drafts, E=2, substitution_only=True)
for name, res in (("full", full), ("substitution only", substitution)):
    print(f"{name:18s}", [" ".join(task.detok(r)) for r in res["states"][2]], "forward passes", res["forward_passes"])
assert [len(r) for r in substitution["states"][2]] == [len(r) for r in drafts]

# %% [markdown]
# ## 5. Training
#
# **Mask mode** (plain masked diffusion; phase 1 of ME-DLM and the whole MDLM baseline): draw one mask
# rate per row, stratified over the batch ($t_b = (\pi(b) + u_b)/B$ for a random permutation $\pi$, so
# every batch covers $(0, 1)$ evenly), mask each response token (padding included) with probability
# $t_b$, and train the token head on the masked positions and the insertion head at position $p$ on the
# token at $p + 1$ when that one is masked. Each head's loss is that of LLaDA (the 8B masked
# diffusion LM that ME-DLM builds on), with $\mathrm{CE}_{b,i}$ the cross-entropy of the true token,
# $\frac{1}{B}\sum_b \frac{1}{t_b L}\sum_{i\ \text{masked}} \mathrm{CE}_{b,i}$ with $L = 7$ the canvas.
# The release instead averages the cross-entropy over a row's masked tokens *and* divides by $t$, which
# gives the rows with few masks most of the weight (a row with one masked token counts as much as a
# fully masked one, times $1/t$); LLaDA's sum cancels that on average, so every mask rate gets about the
# same weight, the all-masked rows that a one-pass draft relies on included.
#
# **Edit mode** (half of ME-DLM's phase-2 batches): mask the clean response at rate $t$, let the
# *current* model fill the masks $P \in \{2, 4, 7\}$ at a time in random order (the release's
# $\{2, 4, 8, 16\}$, cut at our canvas), delete padding, apply $k$ edit passes of the current model,
# then train both heads on every response position against the labels of the resulting draft; each
# head's loss is $\frac{1}{B}\sum_b \frac{1}{L}\sum_i \mathrm{CE}_{b,i}$ (no $1/t$: here $t$ only sets how
# corrupt the draft is, and every position is supervised). The curriculum $k$ grows from 0 to 3
# ($E_{\max} = 4$) over the *second half* of phase 2; the release goes from 0 to 31 over its whole
# phase, but a small model that has not yet learned to copy would be fed its own destructive edits from
# the start.
#
# **The reference of the labels.** The release labels a draft against the one reference response of
# its prompt. Our prompts have three valid answers, and a draft filled from the drawn answer is often
# another valid answer, or close to one: labels against the drawn answer would then ask the model to
# rewrite a correct response. So the reference is the valid answer *nearest* to the draft (edit
# distance; the drawn one on ties), `task.edit_targets`; with one valid answer per prompt this is the
# release's rule. One loss evaluation of each mode on a small batch:

# %%
rng = np.random.default_rng(0)
prompts = task.draw_prompts(8, rng)
answers = [task.valid_answers(p)[int(rng.integers(3))] for p in prompts]
t = np.full(len(prompts), 0.5)  # one mask rate per row
loss, parts = method.mask_mode_loss(model, prompts, answers, t=t, rng=rng)
print("mask mode:", {key: round(float(value), 3) for key, value in parts.items()})
responses = method.edit_mode_batch(model, prompts, answers, t=t, k=1, rng=rng)
targets = task.edit_targets(prompts, answers, responses)
loss, parts = method.edit_mode_loss(model, prompts, targets, responses, t=t)
print("edit mode:", {key: round(float(value), 3) for key, value in parts.items()})
assert torch.isfinite(loss)
# a valid draft of another mode than the drawn one is its own reference
assert task.edit_targets([(3, 1, 2)], [(2, 1, 3)], [[1, 2, 3, method.EOS]]) == [(1, 2, 3)]

# %% [markdown]
# ## 6. The headroom arm: oracle edits
#
# Whether edit passes *can* beat slower unmasking on a given draft is a property of the draft, not of
# the edit heads. The experiment measures it with an oracle labeller, `baselines.oracle_edit_passes`:
# each pass proposes exactly the release's labels ($r$ = token labels, $g$ = gap labels) of the
# current response against its nearest valid answer, and applies them with the same update as phase
# B. Two oracle passes are the best two edit passes can do, and they are scored by the same validity
# code as the model. On the drafts of the untrained model above:

# %%
from replib.papers.me_dlm import baselines

oracle = baselines.oracle_edit_passes([prompt, (5, 0, 7)], drafts, E=2)
for state in oracle["states"]:
    print([" ".join(task.detok(r)) for r in state])
distance = [[task.nearest_valid_distance(x, task.response_answer(r)) for x, r in zip([prompt, (5, 0, 7)], state)]
            for state in oracle["states"]]
print("distance to the nearest valid answer after 0, 1, 2 oracle passes:", distance)
assert all(b <= a for before, after in zip(distance, distance[1:]) for a, b in zip(before, after))

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write `levenshtein(a, b)`, the edit distance with unit costs for replacing, deleting
# and inserting a token. The grader passes strings and plain Python lists of integers.

# %% tags=["solution", "hide-input"]
def levenshtein(a, b):
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j - 1] + (x != y), previous[j] + 1, current[j - 1] + 1))
        previous = current
    return previous[-1]


# %%
exercises.check_levenshtein(levenshtein)

# %% [markdown]
# **Exercise 2.** Write `step_schedule(L, S)`: the number of tokens committed in each of $S$ passes,
# $\lfloor L/S \rfloor + 1$ for the first $L \bmod S$ passes and $\lfloor L/S \rfloor$ after. The grader
# passes plain Python ints and compares your answer as a plain Python list.

# %% tags=["solution", "hide-input"]
def step_schedule(L, S):
    q, r = divmod(L, S)
    return [q + 1 if s < r else q for s in range(S)]


# %%
exercises.check_step_schedule(step_schedule)

# %% [markdown]
# **Exercise 3 (open).** In `edit_mode_batch`, the drafts are filled in *random* order, while inference
# commits the most confident positions first. What would change if training drafts used the
# confidence order too?
#
# ## Summary
#
# ME-DLM is one network with two heads and two decoding phases: a confidence-ordered parallel draft and
# a few parallel edit passes. Its edit training uses the model's own drafts and labels from a canonical
# minimal edit script; the plain masked diffusion LM is the same network trained in mask mode only.
