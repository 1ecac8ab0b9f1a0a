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
# # Synthetic erosion in speech LMs: implementation
#
# **Learning goals.** After this notebook you can
#
# 1. build the toy's speech tokens (phoneme plus pitch bin) for real and synthetic speech, and
#    measure an utterance with the oracle phoneme error rate, the token entropy $H_p$, the repetition
#    rate $R_{rep}$ and the pitch divergence;
# 2. read the text-to-speech-token LM and its factorised embeddings;
# 3. match each piece of DGSA (the paper's alignment: DPO, direct preference optimisation, on two
#    preference sets weighted by the synthetic ratio) in `replib.papers.tts_erosion.method` to its
#    equation, and check it on tiny inputs;
# 4. build DGSA's two preference sets by style-prompt switching;
# 5. follow one iteration of TDSC, the paper's self-improvement loop for a language with no real
#    speech (Sec. 4): the temperature ladder, the self-critique judge, the
#    preference pair and the two updates, and listen to a token sequence.

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
import pandas as pd
import torch
from IPython.display import Audio

from replib import core
from replib.papers.tts_erosion import exercises, experiment, method, task

profile = core.resolve_profile(profile)
torch.set_num_threads(1)  # tiny models run fastest on one thread (and do not fight over a shared machine)
n_align_steps = {"smoke": 3, "book": 10, "paper": 30}[profile]

# %% [markdown]
# ## The token world
#
# A speech token is a pair (phoneme $p$, pitch bin $b$) with 16 phonemes and 8 pitch bins, plus a
# pause (SIL) and an end token: the toy's stand-in for the speech tokens of CosyVoice 2, the
# text-to-speech system the paper builds on, which carry content and prosody. **Real speech** comes
# from 20 speakers, each with a register and an expressiveness $\sigma$: a declining pitch contour,
# accents, jitter, drift within a phoneme, one to three frames per phoneme and occasional pauses; 10%
# of real transcripts carry a wrong phoneme (label noise), and real transcripts never contain phonemes
# 12-15 (the coverage gap). **Synthetic speech** comes from three deterministic "TTS systems": every
# phoneme two frames at the system's register, one bin lower on the last phoneme, exact phonetics. The
# same text, both ways:

# %%
world = task.make_world(0)
rng = np.random.default_rng(0)
text = task.sample_texts(1, world["chain"], rng, task.REAL_PHONEMES)[0]
real = task.real_speech(text, world["registers"][0], world["sigmas"][0], rng)
synthetic = task.synthetic_speech(text, 4)


def describe(speech):
    return " ".join("_" if t == task.SIL else f"{(t - task.SPEECH0) // task.N_BINS}:{(t - task.SPEECH0) % task.N_BINS}"
                    for t in speech)


print("text      ", list(text))
print("real      ", describe(real))
print("synthetic ", describe(synthetic))
assert list(task.oracle_transcript(real)) == list(text) == list(task.oracle_transcript(synthetic))

# %% [markdown]
# Each token prints as phoneme:pitch, `_` is a pause. A corpus is a list of rows; half of them carry a
# **style prompt**, the first 8 tokens of another utterance of the same speaker (or system), which
# the model sees before the text. The first rows of a real corpus:

# %%
rows = task.make_corpus("real", 8, world, rng, phonemes=task.REAL_PHONEMES, label_noise=0.1)
pd.DataFrame([{"speaker": r["speaker"], "text": list(r["text"]), "spoken": list(r["spoken"]),
               "frames": len(r["speech"]), "prompt": len(r["prompt"]) > 0} for r in rows])

# %% [markdown]
# A corpus of a few thousand rows builds in well under a second, so the chapter generates it in
# place rather than caching it as a data set. The model sees
# `[BOS] ([PS] prompt [PE]) text [SEP] speech [EOS]` (BOS and EOS: begin and end of sequence; PS
# and PE: begin and end of the prompt; SEP: the separator between text and speech) and is trained
# on the speech and EOS tokens only:

# %%
ids, mask = task.training_sequence(rows[0]["text"], rows[0]["speech"], rows[0]["prompt"])
assert ids[0] == task.BOS and ids[-1] == task.EOS and mask.sum() == len(rows[0]["speech"]) + 1
assert (ids[mask][:-1] == rows[0]["speech"]).all()
print(ids)

# %% [markdown]
# ## The metrics
#
# All claims are measured on tokens. The oracle "ASR" (automatic speech recognition) drops the pitch,
# collapses runs of one phoneme and drops pauses; the phoneme error rate (PER, our stand-in for the
# paper's word error rate, WER) is its edit distance to the text over the text's length. $H_p$ pools
# every generated token; $R_{rep}$ (theory notebook) counts runs of five; the Jensen-Shannon
# divergence compares the pitch-bin histogram with held-out real speech.

# %%
core.show_source(task.oracle_transcript)
core.show_source(task.per)
core.show_source(task.prosodic_entropy)

# %%
A1, A5, B3 = int(task.speech_token(1, 1)), int(task.speech_token(1, 5)), int(task.speech_token(2, 3))
assert list(task.oracle_transcript(np.array([A1, A5, task.SIL, B3, B3]))) == [1, 2]  # pitch changes do not split
assert task.per(np.array([A1, B3]), np.array([1, 2])) == 0.0
assert task.per(np.array([A1]), np.array([1, 2])) == 0.5                           # one deletion
assert task.per(np.array([B3, A1]), np.array([1, 2])) == 1.0                       # wrong order: two edits
assert task.prosodic_entropy([np.array([A1, A1])]) == 0.0
assert task.prosodic_entropy([np.array([A1, A5]), np.array([B3, task.SIL])]) == 2.0  # four tokens, equally often
assert task.pitch_js([real], [real]) == 0.0 and 0 < task.pitch_js([synthetic], [real]) <= 1.0
print("PER, H_p and JS behave as defined")

# %% [markdown]
# ## The model
#
# `SpeechLM` is a two-layer GPT-2 (a decoder-only transformer language model;
# `transformers.GPT2Model`, width 48) with **factorised, tied embeddings**: speech token $(p,b)$
# enters as $E_{ph}[p]+E_b[b]$ and text phoneme $p$ as $E_{ph}[p]+e_{text}$, so reading a phoneme and
# saying it share one vector; the output logit of $(p,b)$ is $(Wh)\cdot E_{ph}[p]+u_b\cdot h$. Every
# id that is not speech, SIL or EOS gets $-10^4$, so sampling is masked to speech. It is called like a
# `transformers` LM, so the shared `replib.models.causal_lm` trains it (`train_lm`), scores it
# (`sequence_logprob`) and samples it with a key-value cache (`sample`).

# %%
model = task.make_lm(seed=0)
logits = model(torch.as_tensor(ids[None])).logits
assert logits.shape == (1, len(ids), task.VOCAB)
assert (logits[0, :, task.TEXT0:task.SPEECH0] < -1e3).all()  # text tokens can never be generated
out = task.generate(model, [task.prefix(text), task.prefix(text, rows[0]["prompt"])], seed=1)
assert all(((g >= task.SPEECH0) | (g == task.SIL)).all() for g in out)
print("untrained samples:", [describe(g) for g in out])

# %% [markdown]
# ## Sec. 2: the slope of the mixture entropy
#
# $\frac{dH}{d\alpha}=\sum_v\big(p_{syn}(v)-p_{real}(v)\big)\log_2\frac{1}{p_\alpha(v)}$ (App. B, Eq. 24;
# Eq. 22 prints the opposite sign), and at the ends
# $H'(0)=\mathrm{CE}(p_{syn},p_{real})-H(p_{real})$, $H'(1)=H(p_{syn})-\mathrm{CE}(p_{real},p_{syn})$.

# %%
core.show_source(method.mixture_entropy_slope)
core.show_source(method.endpoint_slopes)

# %%
p_r, p_s = np.array([0.5, 0.5, 0.0]), np.array([0.25, 0.0, 0.75])
h = 1e-6
numeric = (method.mixture_entropy(p_r, p_s, 0.4 + h) - method.mixture_entropy(p_r, p_s, 0.4 - h)) / (2 * h)
assert abs(method.mixture_entropy_slope(p_r, p_s, 0.4) - numeric) < 1e-6
left, right = method.endpoint_slopes(p_r, p_s)
assert left == np.inf and right == -np.inf  # each side has a token the other lacks
same = np.array([0.6, 0.4])
assert method.mixture_entropy_slope(same, same, 0.3) == 0.0
print("slope matches finite differences; end slopes", left, right)

# %% [markdown]
# ## Sec. 3: DGSA
#
# **The schedule.** $\lambda_e=\max\big(0,\frac{\alpha-\alpha^*}{1-\alpha^*}\big)$, $\lambda_s=1-\lambda_e$,
# $\alpha^*=0.5$.

# %%
core.show_source(method.dgsa_weights)
assert method.dgsa_weights(0.3) == (1.0, 0.0) and np.allclose(method.dgsa_weights(0.8), (0.4, 0.6))
assert method.dgsa_weights(1.0) == (0.0, 1.0)

# %% [markdown]
# **The DPO loss.** $\mathcal L_{DPO}=-\mathbb E\log\sigma(\beta\Delta_\theta)$ with
# $\Delta_\theta=\log\frac{\pi_\theta(y^+|x)}{\pi_{ref}(y^+|x)}-\log\frac{\pi_\theta(y^-|x)}{\pi_{ref}(y^-|x)}$,
# from summed sequence log-probabilities.

# %%
core.show_source(method.dpo_loss)
zero = torch.zeros(3)
assert torch.isclose(method.dpo_loss(zero, zero, zero, zero, beta=0.1), torch.log(torch.tensor(2.0)))
up = method.dpo_loss(torch.full((3,), 5.0), zero, zero, zero, beta=0.1)   # winner more likely than under pi_ref
down = method.dpo_loss(zero, torch.full((3,), 5.0), zero, zero, beta=0.1)  # loser more likely
assert up < np.log(2) < down
assert torch.isclose(method.dpo_loss(zero + 2, zero, zero + 2, zero, beta=0.1), torch.log(torch.tensor(2.0)))

# %% [markdown]
# **Stage 2, style-prompt switching.** Stage 1 is SFT (supervised fine-tuning) on the training
# mixture. For every real pair, the frozen SFT model speaks the text twice with the same speaker's
# voice: once after a style prompt from another utterance of that speaker ($y_{expr}$), once with no
# prompt ($y_{stab}$). **Stage 3's preference sets.**
# $\mathcal T_{stab}=\{(x, y_{real}\succ y_{expr})\}$ and
# $\mathcal T_{expr}=\{(x, y_{real}\succ y_{stab})\}$; each pair is scored in the context its negative
# came from (with the prompt for $\mathcal T_{stab}$, without for $\mathcal T_{expr}$; the paper does
# not say).

# %%
core.show_source(experiment.style_switch_generations)
core.show_source(experiment.preference_sets)

# %%
cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke", experiment.EXPERIMENT_BOUNDS)
data = experiment.seed_data(cfg, seed=0)
generations = experiment.style_switch_generations(model, data, cfg, seed=0)
sets = experiment.preference_sets(data, generations)
assert len(sets["stab"]) == len(sets["expr"]) == len(data["real"])
assert (sets["stab"].winner_ids == task.PS).any(dim=1).all()   # T_stab is scored after the style prompt
assert not (sets["expr"].winner_ids == task.PS).any()          # T_expr without it
pd.DataFrame({"set": ["T_stab", "T_expr"], "pairs": [len(sets["stab"]), len(sets["expr"])],
              "context width": [sets["stab"].winner_ids.shape[1], sets["expr"].winner_ids.shape[1]]})

# %% [markdown]
# **The dual objective and stage 3.** $\mathcal L_{DGSA}=\lambda_s\mathcal L_{DPO}(\mathcal T_{stab})+\lambda_e
# \mathcal L_{DPO}(\mathcal T_{expr})$ against the frozen SFT model; Standard DPO is the same call with
# $\mathcal T_{expr}$ alone at weight 1.

# %%
core.show_source(method.dgsa_loss)
core.show_source(method.align)

# %%
with torch.no_grad():
    ref = {name: method.set_logprobs(model, pairs) for name, pairs in sets.items()}
    batches = {name: (sets[name], *ref[name]) for name in sets}
    at_start = method.dgsa_loss(model, batches, {"stab": 0.4, "expr": 0.6}, beta=0.1)
    only_expr = method.dgsa_loss(model, batches, {"stab": 0.0, "expr": 1.0}, beta=0.1)
assert torch.isclose(at_start, torch.log(torch.tensor(2.0)))  # pi = pi_ref: Delta = 0 for every pair
assert torch.isclose(only_expr, torch.log(torch.tensor(2.0)))
aligned, losses = method.align(model, sets, {"stab": 0.4, "expr": 0.6}, steps=n_align_steps, batch_pairs=8,
                               lr=1e-3, beta=0.1, seed=0)
assert abs(losses[0] - np.log(2)) < 1e-4 and losses[-1] < losses[0]
assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), task.make_lm(seed=0).state_dict().values()))
print(f"DGSA loss {losses[0]:.4f} -> {losses[-1]:.4f} in {n_align_steps} steps; the SFT model is unchanged")

# %% [markdown]
# Two helpers of the experiment. `joint_logprobs` scores the winners and losers of both sets in one
# forward pass (right padding is invisible to a causal model, so each sequence gets the
# log-probability it has alone; it batches the forward passes and changes no number), and `preference_accuracy` is the convergence
# check of the experiment: the share of a set's pairs on which the aligned model's implicit reward
# margin $\Delta_\theta$ is positive (0 at the start, where $\pi_\theta=\pi_{ref}$ and every $\Delta$ is 0).

# %%
core.show_source(method.preference_accuracy)
with torch.no_grad():
    alone = method.set_logprobs(model, sets["stab"])
    joint = method.joint_logprobs(model, [sets["stab"], sets["expr"]])[0]
assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(alone, joint))
accuracy = {name: method.preference_accuracy(aligned, sets[name], ref[name]) for name in sets}
assert method.preference_accuracy(model, sets["stab"], ref["stab"]) == 0.0
print("preference accuracy after the steps above:", {k: round(v, 2) for k, v in accuracy.items()})

# %% [markdown]
# ## Sec. 4: TDSC, for a language with no real speech
#
# TDSC starts from an SFT model trained on synthetic speech only. In the toy that is a second
# language ("Lao": its own text chain over all 16 phonemes) whose only speech comes from the three
# flat systems speaking it through a **cross-lingual mapping**: phonemes 14 and 15, which the
# systems' front end for the second language lacks (they speak every phoneme of the first language),
# come out as 12 and 13 half the time, and 5% of the other phonemes are swapped;
# utterances with PER $\ge 0.5$ are dropped, as the paper filters its Lao data (App. F.3). So the
# synthetic-only model inherits systematic phonetic errors that a judge who knows the language can
# catch.

# %%
l2_chain = task.text_chain(0, language=1)
l2_rows = task.make_l2_corpus(200, l2_chain, np.random.default_rng(3), mapped_share=0.5, substitution=0.05)
l2_per = np.array([task.per(r["speech"], r["text"]) for r in l2_rows])
assert (l2_per < 0.5).all() and l2_per.mean() > 0  # the filter, and the errors it lets through
assert all(set(r["spoken"][r["text"] == 14]) <= {12, 14} for r in l2_rows)  # 14 is said right or as 12
print(f"synthetic L2 corpus: mean PER {l2_per.mean():.3f}, {np.mean(l2_per > 0):.0%} of utterances with an error")

# %% [markdown]
# **Step 1, temperature-diverse sampling.** At iteration $k$, $N=12$ candidates per text, four at each
# of $T\in\{0.7, 1.0, T^{(k)}_{max}\}$, each from $\pi^{(T)}(y_t\mid\cdot)\propto\pi_\theta(y_t\mid\cdot)^{1/T}$
# (the shared sampler divides the logits by $T$). We sample ancestrally from the whole tempered
# distribution; the paper also truncates it to the nucleus $p=0.9$, which we leave out (a deviation,
# ours). The curriculum: $T^{(k)}_{max}=0.8+0.1k$ for $K=5$ (App. D.2), compressed to run from 0.9 to
# 1.3 in fewer iterations.

# %%
core.show_source(method.temperature_ladder)
assert all(np.isclose(method.temperature_ladder(k, 5)[-1], 0.8 + 0.1 * k) for k in range(1, 6))
assert method.temperature_ladder(1, 2) == (0.7, 1.0, 0.9) and method.temperature_ladder(2, 2) == (0.7, 1.0, 1.3)
logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
entropies = [float(-(torch.softmax(logits / t, 0) * torch.log_softmax(logits / t, 0)).sum()) for t in (0.7, 1.0, 1.3)]
assert entropies[0] < entropies[1] < entropies[2]  # hotter sampling, flatter next-token distribution
print("entropy (nats) of one next-token distribution at T = 0.7, 1.0, 1.3:", np.round(entropies, 3))

# %% [markdown]
# **Step 2, the self-critique judge.** $C(y)=1$ iff $\mathrm{WER}(y)<\tau_w=0.40$, $R_{rep}(y)<\tau_r=0.10$ and
# $\mathrm{Len}(y)\in[\gamma_{min}|x|,\gamma_{max}|x|]$ with $\gamma_{min}=0.5$, $\gamma_{max}=2$. The paper does not
# give the units of Len and $|x|$; we count frames against two frames per text phoneme, the rate of
# the synthetic voices (*proposed*). The judge's WER is the oracle decoder's PER, a stronger judge
# than the paper's ASR (the experiment's `judge_noise` setting makes it mishear).

# %%
core.show_source(method.self_critique)
wer, rep, length = np.array([0.2, 0.5, 0.2, 0.2, 0.0]), np.array([0.0, 0.0, 0.2, 0.0, 0.0]), np.array([10, 10, 10, 30, 5])
accepted, shape_ok = method.self_critique(wer, rep, length, text_length=np.full(5, 5))  # |x| = 5: 10 frames
assert list(accepted) == [True, False, False, False, True]   # too many errors / a loop / too long
assert list(shape_ok) == [True, True, False, False, True]    # the length and repetition filters alone

# %% [markdown]
# **Step 3, the pairs.** The winner $y_w$ is the accepted candidate with the lowest WER (ties: the one
# with the largest token entropy of its own, *proposed*); the loser $y_l$ passes the length and
# repetition filters but has a high WER, so the DPO signal is about phonetics, not duration.

# %%
core.show_source(method.tdsc_pair)
assert method.tdsc_pair(wer, accepted, shape_ok, spread=np.array([1.0, 0, 0, 0, 0.5])) == (4, 1)
assert method.tdsc_pair([0.0, 0.0, 0.6], [True, True, False], [True, True, True], [1.0, 2.0, 0.0]) == (1, 2)
assert method.tdsc_pair([0.0, 0.6], [True, False], [True, False], [0.0, 0.0]) is None  # no usable loser

# %% [markdown]
# **Steps 4 and 5, the updates.** SFT on the accepted set $G^{(k)}$, $-\mathbb E_{y\in G}\log\pi_\theta(y|x)$,
# then DPO on the pairs with the model after the SFT step as $\pi_{ref}$ (the paper names no reference
# for TDSC: *proposed*). Both reuse the chapter's code: `causal_lm.train_lm` and `align` with one set.
# **Self-Training**, the baseline, is the same update without pairs, after sampling as many candidates
# at $T=1$ alone; the experiment gives it as many SFT steps as TDSC's SFT and DPO steps together.

# %%
core.show_source(method.tdsc_update)
core.show_source(experiment.tdsc_round)

# %%
g_rows = [{"text": r["text"], "speech": r["speech"], "prompt": np.zeros(0, int)} for r in l2_rows[:8]]
w_ids, w_mask = task.pad_batch([task.training_sequence(r["text"], r["speech"]) for r in l2_rows[:4]])
l_ids, l_mask = task.pad_batch([task.training_sequence(r["text"], r["speech"][::-1]) for r in l2_rows[:4]])
tdsc_pairs = method.PreferenceSet(w_ids, w_mask, l_ids, l_mask)
updated = method.tdsc_update(model, task.batches(g_rows, 4), tdsc_pairs, sft_steps=2, sft_lr=1e-3, dpo_steps=2,
                             batch_pairs=2, dpo_lr=1e-3, beta=0.1, seed=0)
assert not all(torch.equal(a, b) for a, b in zip(updated.state_dict().values(), model.state_dict().values()))
assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), task.make_lm(seed=0).state_dict().values()))
print("one TDSC update moved a copy of the model; the model it started from is unchanged")

# %% [markdown]
# ## Listening
#
# Every claim is measured on tokens, but a token sequence can also be heard. `task.render` is a
# numpy source-filter synthesiser: each token is a 40 ms frame whose source is a harmonic series at
# the pitch bin's fundamental, $f_0=110\cdot2^{(b-4)/6}$ Hz, shaped by three formant resonances of the
# phoneme; a pause is silence. It is for listening only (the experiment plays a few outputs).

# %%
core.show_source(task.render)
hum = task.render(np.repeat(task.speech_token(0, 7), 10))  # one phoneme held for 0.4 s at pitch bin 7
spectrum = np.abs(np.fft.rfft(hum[1600:6400] * np.hanning(4800)))
freqs = np.fft.rfftfreq(4800, 1 / task.RATE)
low = freqs < 200
assert abs(freqs[low][spectrum[low].argmax()] - task.pitch_hz(7)) < 5  # its fundamental is bin 7's f0
assert len(task.render(real)) == len(real) * 640 and np.abs(task.render(real)).max() <= 1.0
print(f"f0 of bin 7: {task.pitch_hz(7):.1f} Hz; the rendered tone's lowest peak: {freqs[low][spectrum[low].argmax()]:.1f} Hz")

# %% [markdown]
# The real utterance of the first section, rendered (a player; the experiment plays model outputs):

# %%
Audio(task.render(real), rate=task.RATE)

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write `mixture_entropy_slope(p_real, p_syn, alpha)`: the corrected slope in bits,
# with tokens of zero mixture mass contributing nothing.

# %% tags=["solution", "hide-input"]
def mixture_entropy_slope(p_real, p_syn, alpha):
    p_real, p_syn = np.asarray(p_real, float), np.asarray(p_syn, float)
    mix = (1 - alpha) * p_real + alpha * p_syn
    nz = mix > 0
    return float(((p_syn[nz] - p_real[nz]) * -np.log2(mix[nz])).sum())


# %%
exercises.check_mixture_entropy_slope(mixture_entropy_slope)

# %% [markdown]
# **Exercise 2.** Write `dgsa_weights(alpha, alpha_star)`, returning `(lambda_s, lambda_e)`.

# %% tags=["solution", "hide-input"]
def dgsa_weights(alpha, alpha_star=0.5):
    lambda_e = max(0.0, (alpha - alpha_star) / (1 - alpha_star))
    return 1.0 - lambda_e, lambda_e


# %%
exercises.check_dgsa_weights(dgsa_weights)

# %% [markdown]
# **Exercise 3.** Write `prosodic_entropy(generations)`: $H_p$ in bits over all speech tokens and
# pauses of a list of utterances (0 for no tokens). The grader passes a plain Python list of NumPy
# arrays of token ids, one of them possibly empty.

# %% tags=["solution", "hide-input"]
def prosodic_entropy(generations):
    pooled = np.concatenate([np.asarray(g, dtype=int) for g in generations])
    pooled = pooled[pooled >= task.SIL]
    if pooled.size == 0:
        return 0.0
    _, counts = np.unique(pooled, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


# %%
exercises.check_prosodic_entropy(prosodic_entropy)

# %% [markdown]
# **Exercise 4.** Write `self_critique(wer, rep, length, text_length)`, TDSC's judge at the paper's
# thresholds, with Len in frames and two frames per text phoneme: it returns the boolean array
# $C(y)$ of the candidates. The grader passes NumPy arrays and reads your answer as a plain Python
# list of booleans.

# %% tags=["solution", "hide-input"]
def self_critique(wer, rep, length, text_length):
    expected = 2.0 * np.asarray(text_length, float)
    length = np.asarray(length, float)
    in_range = (length >= 0.5 * expected) & (length <= 2.0 * expected)
    return (np.asarray(wer) < 0.40) & (np.asarray(rep) < 0.10) & in_range


# %%
exercises.check_self_critique(self_critique)

# %% [markdown]
# **Exercise 5 (open).** Score both preference sets without the prompt (change the `prompts` passed
# for $\mathcal T_{stab}$ in `preference_sets`). What does DGSA then teach the prompted mode?
#
# ## Summary
#
# The toy's tokens carry a phoneme and a pitch, so the oracle decoder measures stability and token
# entropy measures prosody. DGSA is three stages on top of SFT: generate with and without a style
# prompt from the frozen model, pair the real recording against each, and minimise a weighted sum of
# two DPO losses whose weights follow the synthetic ratio. The experiment runs it at $\alpha=0.8$.
# TDSC, for a language with only synthetic speech, loops four steps: sample each text at three
# temperatures, let a judge keep the candidates that say the text at a sane length without loops,
# fine-tune on what it kept, and run DPO from its best to its worst well-formed candidate.
