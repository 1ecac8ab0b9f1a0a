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
# # Visual chain of thought for shape assembly: theory
#
# **Learning goals.** After this notebook you can
#
# 1. write the factorisations of direct generation, a text-only plan and the interleaved SoT trace
#    (Shape of Thought: a chain of thought, CoT, whose steps alternate a short text with an image of
#    the partly built object);
# 2. build an assembly trace and its rendered states from a part list;
# 3. say why a generator that draws all image tokens at once struggles to count, and what SoT
#    changes about each image it has to draw.
#
# **Sources.** Huo et al., *Shape of Thought: Progressive Object Assembly via Visual Chain-of-Thought*
# (ICML 2026, [arXiv 2601.21081](https://arxiv.org/abs/2601.21081)), with official code
# ([yuhuo03/Shape-of-Thought](https://github.com/yuhuo03/Shape-of-Thought)). The abstract, the top of
# the project page and the repository could be read; the paper body could not. The repository
# decided the sequence format, the loss and the inference loop; the toy world, the model and the
# scores are ours (see "Sources in detail" at the end).

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

from replib import core
from replib.papers.shape_of_thought import task

profile = core.resolve_profile(profile)
core.set_style()
n_samples = {"smoke": 500, "book": 4000, "paper": 20000}[profile]

# %% [markdown]
# ## Three ways to draw an object
#
# A prompt $c$ asks for an object with a structure: here "a table with $k$ legs". Direct generation
# models the image alone, $p(I \mid c)$. A text-only chain of thought first writes a plan
# $r_{1:K}$ and then draws, $p(r_{1:K} \mid c)\,p(I \mid c, r_{1:K})$: the plan is words, and the
# whole geometry is still drawn in one image. Shape of Thought interleaves each step of the plan with
# a rendered state of the partial object:
#
# $$p(r_{1:K}, I_{1:K} \mid c) = \prod_{n=1}^{K} p(r_n \mid c, r_{<n}, I_{<n})\; p(I_n \mid c, r_{\le n}, I_{<n}),
# \qquad I_n = I_{n-1} \cup \text{part}_n ,$$
#
# followed by `<assembly>` and a final image. Each image factor is now a local edit ("copy the last
# state, add one leg"), and the number of parts is the number of steps, which the text decides.
#
# The training traces are built offline from part hierarchies (for SoT-26K, the paper's training set,
# from PartNet, a data set of 3D objects annotated with their parts): order the parts parent before
# child and render the cumulative states. Our toy does the same with a table: a top and $k$ legs, two
# at the ends of the top and the rest in between, not touching each other. The rationale tokens (the
# text of each step) are relative (`LEG_LEFT`, `LEG_INTERIOR`, ...): where exactly a part goes is
# visible only in the rendered states.

# %%
rng = np.random.default_rng(0)
parts = task.sample_table(rng, 3)
states = task.render_states(parts)
fig, axes = plt.subplots(1, len(states), figsize=(2 * len(states), 2.2))
for ax, (name, _), state in zip(axes, parts, states):
    ax.imshow(state, cmap="Greys", vmin=0, vmax=1)
    ax.set(title=name.lower(), xticks=[], yticks=[])
plt.show()

# %% [markdown]
# *Figure 1. An assembly trace of a three-legged table: each step names a part (relative, top) and
# renders the cumulative state $I_n$.*
#
# The parsers that stand in for the scores of T2S-CompBench, the paper's text-to-shape benchmark, read
# a final image: **numeracy** counts the legs (connected pieces below the top row) and compares with
# $k$; **connectivity** asks that the object be one 4-connected piece (pixels joined through shared
# edges, not corners); **trace stability** asks that every state keep the one before and add to it. On
# the trace above all three hold; a leg cut off from the top breaks connectivity (but still counts as
# a leg), a crossbar merges the legs into one piece.

# %%
final = states[-1]
assert task.count_legs(final) == 3 and task.is_connected(final) and task.trace_stable(states)
top_row, left_leg = np.nonzero(final.any(axis=1))[0][0], np.nonzero(final[-1])[0][0]
floating = final.copy()
floating[top_row + 1, left_leg] = False  # the left leg no longer touches the top
crossbar = final.copy()
crossbar[6, :] = True
assert not task.is_connected(floating) and task.count_legs(floating) == 3
assert task.count_legs(crossbar) == 1
assert not task.trace_stable(states[::-1])
print("legs:", task.count_legs(final), task.count_legs(floating), task.count_legs(crossbar))

# %% [markdown]
# ## Why drawing all tokens at once miscounts
#
# BAGEL, the pretrained model that generates both text and images on which SoT is built, generates
# every latent token of an image jointly, and our stand-in reveals the 16 patch tokens of an image in
# a few parallel rounds. In the extreme of one round each token is drawn from its own marginal, and
# the marginals of many valid tables mix into an invalid one: legs at the columns of different tables,
# a top from a third. A small numeric illustration: draw tables with $k = 2$, take the per-token
# marginals of their images, and sample each token independently.

# %%
ks = 2
images = np.stack([task.image_tokens(task.render_states(task.sample_table(rng, ks))[-1])
                   for _ in range(n_samples)])
marginals = np.stack([np.bincount(images[:, j] - task.IMG0, minlength=16) / n_samples for j in range(16)])
draws = np.stack([rng.choice(16, size=n_samples, p=marginals[j]) for j in range(16)], axis=1) + task.IMG0
mixed = [task.tokens_to_image(d) for d in draws]
print(f"independent tokens: numeracy {np.mean([task.count_legs(m) == ks for m in mixed]):.2f}, "
      f"connectivity {np.mean([task.is_connected(m) for m in mixed]):.2f}")

# %% [markdown]
# Drawn token by token from the marginals, only a small share of images has exactly two legs and
# one piece. Several rounds of unmasking let later tokens see earlier ones and recover much of the
# structure, but any residual mixing costs the count. A SoT step has much less to decide: given the
# state with a top, the right leg's column is fixed by the top's end, and only interior legs leave a
# choice. The chapter's question is whether that lower entropy per image turns into better counts
# and attachments, as the paper's README reports (numeracy 88.4 against 64.3 for direct generation
# and 75.9 for a text-only plan; structural topology 84.8 against 65.4 and 71.4).
#
# ## Summary
#
# - Direct generation draws $p(I \mid c)$; a text-only plan adds words; SoT interleaves each step with
#   the rendered partial object, so each image is a local edit and the count is the trace length.
# - A parallel image generator must fix count, spacing and attachment jointly; mixing the marginals of
#   valid objects gives invalid ones.
# - Our parsers (numeracy, connectivity, trace stability) are deterministic stand-ins for
#   T2S-CompBench, whose scoring is not stated in what we could read.
#
# ## Exercises
#
# 1. Repeat the independent-token illustration with $k = 3$. Is mixing worse or better, and why?
# 2. Compute the same marginals for the SoT step "add the right leg" given the state with a top and a
#    left leg. How many distinct next states are there per previous state?
#
# ## Sources in detail
#
# The abstract, the top of the project page and the official repository could be read: the README
# with its main results table, the data loader, the training arguments and the inference script. The
# paper body (how SoT-26K orders parts, the rendering viewpoint, how T2S-CompBench scores an image,
# the ablations) could not be read and is "not stated" here. Ours: the 8x8 table world, the
# 2x2-patch image tokens, masked-token parallel decoding as a stand-in for BAGEL's flow matching (a
# way of training an image generator to turn noise into images), the tiny model, the deterministic
# metric parsers that stand in for the benchmark, and every budget.
