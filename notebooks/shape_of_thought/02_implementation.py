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
# # Visual chain of thought for shape assembly: implementation
#
# This notebook builds the pieces of SoT (Shape of Thought: a visual chain of thought whose steps
# alternate a short text with an image of the partly built object) from
# `replib.papers.shape_of_thought` (the toy world in `task`, the model, loss and inference loop in
# `method`) and checks each on tiny inputs.
#
# **Learning goals.** After this notebook you can
#
# 1. write the token sequences of direct generation, a text-only plan and the SoT trace;
# 2. build the block attention mask of BAGEL (the pretrained text-and-image model SoT fine-tunes):
#    causal between blocks, bidirectional inside an image, with a noisy copy of an image that only it
#    can see;
# 3. implement the loss (text cross-entropy plus masked-image cross-entropy) and the interleaved
#    inference loop with parallel image decoding.

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
import matplotlib.pyplot as plt
import numpy as np
import torch
from torch.func import stack_module_state
from torch.nn import functional as F

from replib import core
from replib.core.runtime import compute_threads
from replib.papers.shape_of_thought import exercises, method, task

profile = core.resolve_profile(profile)
core.set_style()
demo_steps = {"smoke": 10, "book": 60, "paper": 300}[profile]

# %% [markdown]
# ## Sequences (the release data loader's order)
#
# One record is the prompt, then per step the rationale and (for SoT) the rendered state, then
# `ASSEMBLY` and the final image. An image is 16 tokens, one per 2x2 patch (4 bits).

# %%
rng = np.random.default_rng(0)
parts = task.sample_table(rng, 2)
for variant in task.VARIANTS:
    seq, is_img = task.build_sequence(variant, 2, parts)
    text = [task.VOCAB[t] for t, i in zip(seq, is_img) if not i]
    print(f"{variant:9s} {len(seq):3d} tokens, {sum(is_img) // task.IMG_LEN} images, text {text}")
seq, is_img = task.build_sequence("sot", 2, parts)
assert sum(is_img) == task.IMG_LEN * 4  # three states and the final image
assert (task.tokens_to_image(seq[-task.IMG_LEN:]) == task.render_states(parts)[-1]).all()

# %% [markdown]
# ## The block attention mask
#
# Each token gets a group: its own index for text, the first index of its block for an image. A
# query may attend to a key whose group is not later than its own, so attention is causal between
# blocks and bidirectional inside an image. For training, a noisy copy of an image block (some tokens
# replaced by `MASK`) is appended: it sees the clean context strictly before its block and itself,
# and no other token sees it, as in BAGEL, where noised latents and clean latents of the same image
# sit in one sequence.

# %%
core.show_source(method.block_groups)
core.show_source(method.attention_mask)

# %%
flags = [False, False, True, True, False, True, True]
g = method.block_groups(flags)
assert g.tolist() == [0, 1, 2, 2, 4, 5, 5]
toy_img_len = task.IMG_LEN
group = torch.as_tensor(np.r_[g, [2, 2]])[None]  # plus a noisy copy of the first image
noisy = torch.as_tensor([False] * 7 + [True, True])[None]
valid = torch.ones_like(noisy)
m = method.attention_mask(group, noisy, valid)[0]
assert m[2, 3] and m[3, 2]  # bidirectional inside an image
assert not m[1, 2] and m[4, 3]  # text sees earlier images only
assert m[7, 1] and m[7, 8] and not m[7, 2]  # the noisy copy: context before its block, itself
assert not m[:7, 7:].any()  # nobody else sees the noisy copy
plt.figure(figsize=(3.2, 3.2))
plt.imshow(m, cmap="Greys")
plt.xlabel("key")
plt.ylabel("query")
plt.show()

# %% [markdown]
# *Figure 1. The block attention mask of a tiny sequence (two prompt tokens, an image of two tokens,
# a text token, an image, and a noisy copy of the first image in the last two rows); black means
# "may attend".*
#
# ## The training batch and the loss
#
# The release loss is
# $\mathcal L = w_{ce}\,\mathrm{CE}_{\text{text}} + w_{mse}\,\mathrm{MSE}_{\text{flow}}$ with both
# weights 1: a cross-entropy (CE) on the text tokens and a mean squared error (MSE) for flow matching,
# which trains the image generator to turn noise into images. Our discrete stand-in for the
# flow-matching term masks a fraction $t \sim U(0.05, 1)$ of an image block's tokens and takes the
# cross-entropy of the clean tokens at the masked places. Which blocks (our choice; the release
# noises every image): the final image every time, and for SoT also one intermediate state drawn
# uniformly. So SoT's final image is trained exactly as often as direct generation's only image
# (image-block matching); drawing one block among all of a SoT record's $k + 2$ images would train
# its final image in only one step in four ($k = 2$) or five ($k = 3$). The text term is next-token cross-entropy on every
# text token after the prompt.

# %%
core.show_source(method.make_training_batch)
core.show_source(method.sot_loss)

# %%
records = [task.build_sequence("sot", k, task.sample_table(rng, k)) for k in (2, 3)]
batch = method.make_training_batch(records, np.random.default_rng(1))
n_clean = len(records[0][0])
assert batch["ids"].shape[1] == len(records[1][0]) + 2 * task.IMG_LEN  # two noisy copies per SoT record
assert int(batch["pos"][0, n_clean]) == n_clean - task.IMG_LEN  # the first copy is the final image
assert (batch["img_target"][0, :n_clean] == -1).all()  # image targets only in the noisy copies
masked = batch["ids"][0, n_clean:n_clean + task.IMG_LEN] == task.TOK["MASK"]
assert (batch["img_target"][0, n_clean:n_clean + task.IMG_LEN] >= 0).eq(masked).all()
assert batch["text_target"][0, 1] == task.TOK["TOP"]  # the prompt's last token predicts the first step
model = method.UnifiedDecoder(d=32, seed=0)
logits = model(batch["ids"], batch["pos"], batch["mask"])
tt, it = batch["text_target"], batch["img_target"]
by_hand = F.cross_entropy(logits[tt >= 0][:, :task.IMG0], tt[tt >= 0]) + \
    F.cross_entropy(logits[it >= 0][:, task.IMG0:task.IMG0 + 16], it[it >= 0] - task.IMG0)
assert torch.isclose(method.sot_loss(logits, batch), by_hand)
print(f"loss of an untrained model: {float(by_hand):.2f} (log 10 + log 16 = {np.log(10) + np.log(16):.2f}: 10 text, 16 patch classes)")

# %% [markdown]
# ## Training the seeds as one model
#
# The experiment trains five seeds of each variant. The seeds' models have the same shapes, so their
# parameters are stacked along a new leading axis (`torch.func.stack_module_state`) and one forward
# pass runs all of them: each linear layer becomes a batched matrix product over the seed axis, and
# attention folds the seeds into the batch of torch's fused attention kernel. Each seed still draws
# its own batches from its own tables, its gradient is clipped on its own, and AdamW works element
# by element, so every seed follows exactly the single-model recipe.

# %%
core.show_source(method.stacked_forward)

# %%
pair = [method.UnifiedDecoder(d=32, seed=s) for s in (0, 1)]
stacked_params, _ = stack_module_state(pair)
both = method.stacked_forward(stacked_params, torch.stack([batch["ids"]] * 2), torch.stack([batch["pos"]] * 2),
                              torch.stack([batch["mask"]] * 2))
for s, single in enumerate(pair):
    assert torch.allclose(both[s], single(batch["ids"], batch["pos"], batch["mask"]), atol=1e-5)
print("stacked forward == each model's own forward, for both seeds")

# %% [markdown]
# ## Parallel image decoding
#
# An image starts as 16 `MASK` tokens. In each of $S$ rounds every masked token is sampled at
# temperature $\tau$, and the most confident samples are kept; a linear schedule fixes how many.

# %%
core.show_source(method.unmask_schedule)
core.show_source(method.generate_image)

# %% [markdown]
# **Exercise 1.** Write the schedule: how many of `n_tokens` tokens each of `rounds` rounds reveals,
# so that after round $s$ exactly $\lceil n\,s / S \rceil$ are known. The grader passes two plain
# Python ints and compares your answer as a plain Python list of ints, one per round.

# %% tags=["solution", "hide-input"]
def unmask_schedule(n_tokens, rounds):
    done = [int(np.ceil(n_tokens * s / rounds)) for s in range(rounds + 1)]
    return [b - a for a, b in zip(done, done[1:])]


# %%
exercises.check_unmask_schedule(unmask_schedule)

# %% [markdown]
# ## The inference loop
#
# The release loop: sample the next text (temperature 0.3); unless it is `ASSEMBLY`, generate the
# state image it announces and append it; repeat; then generate the final image. The model decides
# when to stop. We train a small SoT model for a few steps and run the loop.

# %%
core.show_source(method.generate)

# %%
with compute_threads(1):
    train = [task.build_sequence("sot", k, task.sample_table(rng, k)) for k in (2, 3) * 100]
    model, losses = method.train_model(train, steps=demo_steps, d=32, lr=0.01, seed=0)
    prompts = [[task.TOK["TABLE"], task.TOK["K2"]], [task.TOK["TABLE"], task.TOK["K3"]]]
    out = method.generate(model, "sot", prompts, img_rounds=4, img_temperature=1.0, seed=0)
assert losses[-1] < losses[0]
for o in out:
    assert len(o["states"]) == len(o["rationales"]) <= 6 and o["final"].shape == (task.IMG_LEN,)
fig, axes = plt.subplots(1, len(out[1]["states"]) + 1, figsize=(2 * len(out[1]["states"]) + 2, 2.2),
                         squeeze=False)
for ax, s, r in zip(axes[0], out[1]["states"], out[1]["rationales"]):
    ax.imshow(task.tokens_to_image(s), cmap="Greys", vmin=0, vmax=1)
    ax.set(title=task.VOCAB[r].lower(), xticks=[], yticks=[])
axes[0, -1].imshow(task.tokens_to_image(out[1]["final"]), cmap="Greys", vmin=0, vmax=1)
axes[0, -1].set(title="final", xticks=[], yticks=[])
plt.show()

# %% [markdown]
# *Figure 2. A trace generated for "a table with 3 legs" by a SoT model trained for only a few steps
# (the experiment trains far longer): rationale tokens over the states the model drew.*
#
# ## The metric parsers
#
# **Exercise 2.** Write the numeracy parser: the number of legs of an image is the number of
# 4-connected pieces below its top row (the first row with a pixel); an empty image has none.

# %% tags=["solution", "hide-input"]
def count_legs(img):
    rows = np.nonzero(img.any(axis=1))[0]
    if len(rows) == 0:
        return 0
    below = img[rows[0] + 1:].copy()
    pieces = 0
    for r, c in zip(*np.nonzero(below)):
        if below[r, c]:
            pieces += 1
            stack = [(r, c)]
            below[r, c] = False
            while stack:
                y, x = stack.pop()
                for yy, xx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                    if 0 <= yy < below.shape[0] and 0 <= xx < below.shape[1] and below[yy, xx]:
                        below[yy, xx] = False
                        stack.append((yy, xx))
    return pieces


# %%
exercises.check_count_legs(count_legs)

# %% [markdown]
# ## Summary
#
# - The three variants share one model and one loss; only their sequences differ. Every record trains
#   its final image (SoT's also one state), so the variants' final images get the same supervision.
# - The seeds of a variant train as one stacked model, each seed exactly as if alone.
# - BAGEL's mask: causal between blocks, bidirectional in an image, a noisy copy seen by itself only.
# - Images are drawn in parallel rounds; text is sampled one token at a time, and the model itself
#   ends the trace with `ASSEMBLY`.
#
# ## Exercises
#
# 3. Train every image block of a record at once (one noisy copy per block, as the release does).
#    How much longer is a SoT batch, and does the loss fall faster per step?
# 4. With `img_rounds=1` every token is drawn in one round. Generate a few SoT traces: which steps
#    fail first?
