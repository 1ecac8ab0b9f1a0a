"""The toy speech-token world: phoneme-plus-pitch tokens, real speech with prosodic variety and a
phoneme gap, flat synthetic voices, the text-to-speech-token LM, and the token metrics.

Token ids (one vocabulary for text and speech, as in CosyVoice 2's text-speech LM):

* specials ``PAD, EOS, BOS, SEP, PS, PE, SIL`` (PS/PE enclose a style prompt, SIL is a pause frame);
* text phoneme p: ``TEXT0 + p``;
* speech token (p, b), phoneme p realised at pitch bin b in 0..7: ``SPEECH0 + p * N_BINS + b``.

A sequence is ``[BOS] ([PS] prompt [PE]) text [SEP] speech [EOS]``; the LM is trained on the speech
tokens and EOS only. Contents: the vocabulary constants; texts and speech, :func:`text_chain`,
:func:`sample_texts`, :func:`speech_token`, :func:`real_speech`, :func:`synthetic_speech`,
:func:`make_world`, :func:`make_corpus` (a real or synthetic corpus with speakers and prompts),
:func:`style_prompt`; sequences, :func:`prefix`, :func:`training_sequence`, :func:`pad_batch`,
:func:`batches`; the model, :class:`SpeechLM` (a GPT-2 backbone with factorised, tied phoneme and
pitch embeddings), :func:`make_lm` and :func:`generate` (grouping prefixes by length for
:func:`replib.models.causal_lm.sample`); the metrics, :func:`oracle_transcript`,
:func:`edit_distance`, :func:`per`, :func:`prosodic_entropy` (H_p), :func:`repetition_rate`
(R_rep), :func:`pitch_bins`, :func:`pitch_std`, :func:`pitch_histogram`, :func:`pitch_js`, and
:func:`evaluate`, which computes them all on a set of generations.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

PAD, EOS, BOS, SEP, PS, PE, SIL = range(7)
N_PHONEMES = 16
N_BINS = 8
TEXT0 = 7
SPEECH0 = TEXT0 + N_PHONEMES
VOCAB = SPEECH0 + N_PHONEMES * N_BINS
REAL_PHONEMES = tuple(range(12))  # real transcripts never contain phonemes 12-15 (the coverage gap)
BACKBONE_PHONEMES = tuple(range(12))  # the "pretraining" language
PROMPT_LEN = 8
MAX_TEXT = 7
MAX_SPEECH = 3 * MAX_TEXT + MAX_TEXT - 1
N_SPEAKERS = 20
SYSTEM_REGISTERS = (3, 4, 5)  # three deterministic "TTS systems"
L2_MAPPING = {14: 12, 15: 13}  # phonemes of the second language that the TTS systems' language lacks


# --------------------------------------------------------------------------------------------
# Texts and speech
# --------------------------------------------------------------------------------------------

def text_chain(seed: int, language: int = 0) -> np.ndarray:
    """A language's first-order Markov chain over the 16 phonemes: Dirichlet(0.5) rows, no
    self-transitions (so a run of one phoneme is one phoneme). ``language`` 0 is the target language
    of the sweep ("Thai"), 1 the second language of TDSC ("Lao")."""
    rng = np.random.default_rng([seed, 11 + language])
    chain = rng.dirichlet(np.full(N_PHONEMES, 0.5), size=N_PHONEMES)
    np.fill_diagonal(chain, 0.0)
    return chain / chain.sum(axis=1, keepdims=True)


def sample_texts(n: int, chain: np.ndarray, rng: np.random.Generator, phonemes=None) -> list[np.ndarray]:
    """``n`` phoneme strings of length U{4..7} from ``chain`` restricted to ``phonemes`` (all if None)."""
    allowed = np.zeros(N_PHONEMES, bool)
    allowed[list(range(N_PHONEMES) if phonemes is None else phonemes)] = True
    rows = chain * allowed
    rows = rows / rows.sum(axis=1, keepdims=True)
    texts = []
    for length in rng.integers(4, MAX_TEXT + 1, size=n):
        seq = [rng.choice(np.flatnonzero(allowed))]
        for _ in range(length - 1):
            seq.append(rng.choice(N_PHONEMES, p=rows[seq[-1]]))
        texts.append(np.array(seq))
    return texts


def speech_token(phoneme, pitch):
    """The id of speech token (phoneme, pitch bin); works on arrays."""
    return SPEECH0 + np.asarray(phoneme) * N_BINS + np.asarray(pitch)


def real_speech(text: np.ndarray, register: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Human prosody: a declining pitch contour from the speaker's register, accents (+round(1.5
    sigma) on a quarter of the phonemes), Gaussian jitter of sd 0.6 sigma, drift of one bin within a
    phoneme (p = 0.3), durations 1-3 frames (one more on the last phoneme, at most 3) and a pause
    after 15% of the phonemes."""
    n = len(text)
    out = []
    for i, p in enumerate(text):
        level = register + 0.75 - 1.5 * i / (n - 1) + (rng.random() < 0.25) * round(1.5 * sigma)
        b = int(np.clip(round(level + rng.normal(0.0, 0.6 * sigma)), 0, N_BINS - 1))
        for _ in range(min(3, 1 + rng.binomial(2, 0.35) + (i == n - 1))):
            out.append(int(speech_token(p, b)))
            if rng.random() < 0.3:
                b = int(np.clip(b + rng.choice([-1, 1]), 0, N_BINS - 1))
        if i < n - 1 and rng.random() < 0.15:
            out.append(SIL)
    return np.array(out)


def synthetic_speech(text: np.ndarray, register: int) -> np.ndarray:
    """Deterministic TTS: every phoneme two frames at the system's register, one bin lower on the
    last phoneme, no pauses, exact phonetics."""
    pitch = np.full(len(text), register)
    pitch[-1] -= 1
    return np.repeat(speech_token(text, pitch), 2)


def make_world(seed: int) -> dict:
    """The language and its speakers: the text chain (:func:`text_chain`), and per real speaker a
    register in 2..5 and an expressiveness sigma in [0.8, 1.5]."""
    rng = np.random.default_rng([seed, 3])
    return {"chain": text_chain(seed), "registers": rng.integers(2, 6, size=N_SPEAKERS),
            "sigmas": rng.uniform(0.8, 1.5, size=N_SPEAKERS)}


def make_corpus(kind: str, n: int, world: dict, rng: np.random.Generator, *, phonemes=None,
                label_noise: float = 0.0, prompt_share: float = 0.5) -> list[dict]:
    """``n`` utterances of ``kind`` "real" (20 speakers, register in 2..5 and expressiveness sigma
    in [0.8, 1.5] per speaker; a share ``label_noise`` of transcripts carries one substituted
    phoneme) or "synthetic" (three systems). A share ``prompt_share`` of utterances carries a style
    prompt: the first 8 tokens of another utterance of the same speaker or system. Each row:
    ``text`` (the transcript), ``spoken`` (the phonemes actually spoken), ``speech``, ``speaker``,
    ``prompt`` (an array, empty if none)."""
    texts = sample_texts(n, world["chain"], rng, phonemes)
    rows = []
    for text in texts:
        if kind == "real":
            speaker = int(rng.integers(N_SPEAKERS))
            speech = real_speech(text, world["registers"][speaker], world["sigmas"][speaker], rng)
        else:
            speaker = int(rng.integers(len(SYSTEM_REGISTERS)))
            speech = synthetic_speech(text, SYSTEM_REGISTERS[speaker])
        transcript = text.copy()
        if rng.random() < label_noise:
            where = rng.integers(len(text))
            transcript[where] = rng.choice([p for p in (phonemes or range(N_PHONEMES)) if p != text[where]])
        rows.append({"kind": kind, "text": transcript, "spoken": text, "speech": speech, "speaker": speaker})
    by_speaker = {}
    for i, row in enumerate(rows):
        by_speaker.setdefault(row["speaker"], []).append(i)
    for i, row in enumerate(rows):
        others = [j for j in by_speaker[row["speaker"]] if j != i]
        row["prompt"] = (style_prompt(rows[rng.choice(others)]["speech"])
                         if others and rng.random() < prompt_share else np.zeros(0, int))
    return rows


def style_prompt(speech: np.ndarray) -> np.ndarray:
    """z_style: the first 8 speech tokens of a reference utterance (repeated if it is shorter)."""
    return np.resize(speech, PROMPT_LEN)


def cross_lingual_speech(text: np.ndarray, register: int, rng: np.random.Generator, *, mapped_share: float,
                         substitution: float) -> tuple[np.ndarray, np.ndarray]:
    """A deterministic TTS of another language speaking the second language (Sec. 4's Lao data, made
    with Thai engines and a cross-lingual phoneme mapping): phonemes its language lacks
    (:data:`L2_MAPPING`, 14 and 15) come out as their mapped neighbours (12, 13) with probability
    ``mapped_share``; every other phoneme is swapped for a random one with probability
    ``substitution``; the prosody is :func:`synthetic_speech`'s. Returns (phonemes spoken, speech)."""
    spoken = text.copy()
    for i, p in enumerate(text):
        if int(p) in L2_MAPPING:
            if rng.random() < mapped_share:
                spoken[i] = L2_MAPPING[int(p)]
        elif rng.random() < substitution:
            spoken[i] = rng.choice([q for q in range(N_PHONEMES) if q != p])
    return spoken, synthetic_speech(spoken, register)


def make_l2_corpus(n: int, chain: np.ndarray, rng: np.random.Generator, *, mapped_share: float,
                   substitution: float, max_per: float = 0.5) -> list[dict]:
    """``n`` synthetic utterances of the second language by the three systems
    (:func:`cross_lingual_speech`), keeping those whose oracle PER against the text is below
    ``max_per`` (the paper's filter of its Lao data, App. F.3); no prompts. Rows as
    :func:`make_corpus`'s."""
    rows = []
    while len(rows) < n:
        text = sample_texts(1, chain, rng)[0]
        system = int(rng.integers(len(SYSTEM_REGISTERS)))
        spoken, speech = cross_lingual_speech(text, SYSTEM_REGISTERS[system], rng, mapped_share=mapped_share,
                                              substitution=substitution)
        if per(speech, text) < max_per:
            rows.append({"kind": "synthetic", "text": text, "spoken": spoken, "speech": speech, "speaker": system,
                         "prompt": np.zeros(0, int)})
    return rows


# --------------------------------------------------------------------------------------------
# Sequences
# --------------------------------------------------------------------------------------------

def prefix(text: np.ndarray, prompt: np.ndarray | None = None) -> np.ndarray:
    """``[BOS] ([PS] prompt [PE]) text [SEP]``: the context the speech is generated from."""
    head = [BOS] + ([PS, *prompt, PE] if prompt is not None and len(prompt) else [])
    return np.array(head + list(TEXT0 + np.asarray(text)) + [SEP])


def training_sequence(text, speech, prompt=None) -> tuple[np.ndarray, np.ndarray]:
    """The ids of prefix + speech + EOS and the mask of the positions trained on (speech and EOS)."""
    head = prefix(text, prompt)
    ids = np.concatenate([head, speech, [EOS]])
    mask = np.arange(len(ids)) >= len(head)
    return ids, mask


def pad_batch(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad (ids, mask) pairs with PAD (no attention mask is needed: padding comes last)."""
    width = max(len(ids) for ids, _ in pairs)
    ids = torch.full((len(pairs), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.bool)
    for i, (a, m) in enumerate(pairs):
        ids[i, : len(a)] = torch.as_tensor(a)
        mask[i, : len(m)] = torch.as_tensor(m)
    return ids, mask


def batches(rows: list[dict], batch_size: int):
    """A ``draw_batch(rng)`` for :func:`replib.models.causal_lm.train_lm`: ``batch_size`` rows drawn
    uniformly (SFT's expectation over D = D_real and D_syn), each with its prompt if it has one."""
    sequences = [training_sequence(r["text"], r["speech"], r["prompt"]) for r in rows]

    def draw_batch(rng):
        return pad_batch([sequences[i] for i in rng.integers(len(sequences), size=batch_size)])

    return draw_batch


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

class SpeechLM(nn.Module):
    """pi_theta(y | x): a GPT-2 backbone (``transformers.GPT2Model``, fed ``inputs_embeds``) with
    factorised, tied embeddings: speech token (p, b) embeds as E_ph[p] + E_b[b], text phoneme p as
    E_ph[p] + e_text; its logit is (W h) . E_ph[p] + u_b . h; SIL and EOS have their own vectors,
    every other id gets -1e4 (the sampler is masked to speech tokens and EOS). Called like a
    ``transformers`` LM (``model(ids).logits``, ``use_cache`` and ``cache``), so that
    :mod:`replib.models.causal_lm` trains, scores and samples it."""

    def __init__(self, n_embd: int = 48, n_layer: int = 2, n_head: int = 2, n_positions: int = 64):
        super().__init__()
        from transformers import GPT2Config, GPT2Model

        config = GPT2Config(vocab_size=1, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        self.backbone = GPT2Model(config)
        scale = 0.1
        self.special = nn.Parameter(scale * torch.randn(TEXT0, n_embd))
        self.phoneme = nn.Parameter(scale * torch.randn(N_PHONEMES, n_embd))
        self.pitch = nn.Parameter(scale * torch.randn(N_BINS, n_embd))
        self.text = nn.Parameter(scale * torch.randn(n_embd))
        self.out_phoneme = nn.Linear(n_embd, n_embd, bias=False)  # W
        self.out_pitch = nn.Parameter(scale * torch.randn(N_BINS, n_embd))  # u_b
        self.out_special = nn.Parameter(scale * torch.randn(2, n_embd))  # EOS, SIL
        allowed = torch.full((VOCAB,), -1e4)
        allowed[[EOS, SIL]] = 0.0
        allowed[SPEECH0:] = 0.0
        self.register_buffer("allowed", allowed)

    def input_table(self) -> torch.Tensor:
        """The embedding of every id: specials, text phonemes E_ph + e_text, speech E_ph[p] + E_b[b]."""
        speech = (self.phoneme[:, None] + self.pitch[None]).reshape(-1, self.phoneme.shape[1])
        return torch.cat([self.special, self.phoneme + self.text, speech])

    def forward(self, ids, use_cache: bool = False, cache=None, past_key_values=None):
        out = self.backbone(inputs_embeds=self.input_table()[ids], use_cache=use_cache,
                            cache=cache if cache is not None else past_key_values)
        h = out.last_hidden_state
        phoneme_part = self.out_phoneme(h) @ self.phoneme.T  # (..., P)
        speech = (phoneme_part[..., :, None] + (h @ self.out_pitch.T)[..., None, :]).flatten(-2)
        special = h.new_zeros(*h.shape[:-1], TEXT0)
        special[..., [EOS, SIL]] = h @ self.out_special.T
        logits = torch.cat([special, h.new_zeros(*h.shape[:-1], N_PHONEMES), speech], dim=-1) + self.allowed
        new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return SimpleNamespace(logits=logits, cache=new_cache, past_key_values=new_cache)


def make_lm(seed: int, n_embd: int = 48, n_layer: int = 2, n_head: int = 2) -> SpeechLM:
    """A :class:`SpeechLM` with weights drawn from ``seed`` (the global RNG is left as it was)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = SpeechLM(n_embd, n_layer, n_head)
    return model.eval()


def generate(model, prefixes: list[np.ndarray], *, temperature: float = 1.0, seed: int = 0) -> list[np.ndarray]:
    """Sample a speech-token sequence (EOS removed) after each prefix, ancestral sampling at
    ``temperature`` with a key-value cache; prefixes are grouped by length for the sampler."""
    from replib.models import causal_lm  # loads transformers only when a model samples

    generator = torch.Generator().manual_seed(seed)  # a CPU generator: the same draws on every device
    where = next(model.parameters()).device
    out: list = [None] * len(prefixes)
    lengths = np.array([len(p) for p in prefixes])
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        prompts = torch.as_tensor(np.stack([prefixes[i] for i in rows]), device=where)
        tokens, _ = causal_lm.sample(model, prompts, MAX_SPEECH + 1, eos_id=EOS, pad_id=PAD,
                                     temperature=temperature, generator=generator)
        for i, row in zip(rows, tokens.cpu().numpy()):
            out[i] = row[(row != PAD) & (np.cumsum(row == EOS) == 0)]
    return out


# --------------------------------------------------------------------------------------------
# Metrics (all on tokens)
# --------------------------------------------------------------------------------------------

def is_speech(tokens: np.ndarray) -> np.ndarray:
    """True on (phoneme, pitch) tokens, False on pauses and specials."""
    return np.asarray(tokens) >= SPEECH0


def oracle_transcript(speech: np.ndarray) -> np.ndarray:
    """The exact "ASR": drop pitch, collapse runs of one phoneme, drop pauses."""
    speech = np.asarray(speech)
    phonemes = np.where(is_speech(speech), (speech - SPEECH0) // N_BINS, -1)
    if phonemes.size == 0:
        return phonemes
    keep = np.r_[True, phonemes[1:] != phonemes[:-1]]
    collapsed = phonemes[keep]
    return collapsed[collapsed >= 0]


def edit_distance(a, b) -> int:
    """Levenshtein distance between two sequences."""
    row = np.arange(len(b) + 1)
    for i, x in enumerate(a, start=1):
        prev, row = row, np.empty_like(row)
        row[0] = i
        for j, y in enumerate(b, start=1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (x != y))
    return int(row[-1])


def per(speech: np.ndarray, text: np.ndarray) -> float:
    """Phoneme error rate of one utterance: edit distance of the oracle transcript to the text,
    over the text's length (the stand-in for WER)."""
    return edit_distance(oracle_transcript(speech), list(text)) / len(text)


def prosodic_entropy(generations: list[np.ndarray]) -> float:
    """H_p = -sum_v p(v) log2 p(v), p the frequency of speech token v (pauses included) pooled over
    all utterances, in bits."""
    pooled = np.concatenate([np.asarray(g) for g in generations] + [np.zeros(0, int)])
    pooled = pooled[(pooled >= SIL)]
    if pooled.size == 0:
        return 0.0
    p = np.bincount(pooled, minlength=VOCAB)[SIL:] / pooled.size
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


def repetition_rate(generations: list[np.ndarray], k: int = 4) -> float:
    """R_rep: the share of positions i (pooled over utterances, i = 1..N-k) where y_i = ... = y_{i+k}."""
    hits = total = 0
    for g in generations:
        g = np.asarray(g)
        if len(g) > k:
            windows = np.lib.stride_tricks.sliding_window_view(g, k + 1)
            hits += int((windows == windows[:, :1]).all(axis=1).sum())
            total += len(windows)
    return hits / total if total else 0.0


def pitch_bins(speech: np.ndarray) -> np.ndarray:
    """The pitch bin of every (phoneme, pitch) token of an utterance (pauses dropped)."""
    speech = np.asarray(speech)
    return (speech[is_speech(speech)] - SPEECH0) % N_BINS


def pitch_std(generations: list[np.ndarray]) -> float:
    """Mean over utterances of the pitch-bin standard deviation (the F0-std analogue)."""
    stds = [pitch_bins(g).std() for g in generations if is_speech(g).sum() > 1]
    return float(np.mean(stds)) if stds else 0.0


def pitch_histogram(generations: list[np.ndarray]) -> np.ndarray:
    """The share of frames in each pitch bin, pooled over utterances."""
    counts = np.bincount(np.concatenate([pitch_bins(g) for g in generations] + [np.zeros(0, int)]),
                         minlength=N_BINS).astype(float)
    return counts / max(counts.sum(), 1.0)


def pitch_js(generations: list[np.ndarray], reference: list[np.ndarray]) -> float:
    """Jensen-Shannon divergence (bits) between the pitch-bin histograms of the generations and of
    held-out real speech (the naturalness proxy)."""
    p, q = pitch_histogram(generations), pitch_histogram(reference)
    m = (p + q) / 2

    def kl(a):
        nz = a > 0
        return float((a[nz] * np.log2(a[nz] / m[nz])).sum())

    return 0.5 * kl(p) + 0.5 * kl(q)


def evaluate(generations: list[np.ndarray], texts: list[np.ndarray], reference: list[np.ndarray]) -> dict:
    """Every metric of the chapter on one set of generations for ``texts``."""
    return {"per": float(np.mean([per(g, t) for g, t in zip(generations, texts)])),
            "hp": prosodic_entropy(generations), "rep": repetition_rate(generations),
            "pitch_std": pitch_std(generations), "js": pitch_js(generations, reference),
            "length": float(np.mean([len(g) for g in generations]))}


# --------------------------------------------------------------------------------------------
# Listening (not part of any claim)
# --------------------------------------------------------------------------------------------

RATE = 16000  # samples per second of the rendered audio
FRAME_S = 0.04  # one speech token is a 40 ms frame
FORMANTS = np.array([[730, 1090, 2440], [270, 2290, 3010], [300, 870, 2240], [530, 1840, 2480],
                     [660, 1720, 2410], [570, 840, 2410], [440, 1020, 2240], [490, 1350, 1690],
                     [390, 1990, 2550], [640, 1190, 2390], [360, 640, 2390], [620, 1660, 2430],
                     [450, 2200, 2800], [700, 1400, 2600], [330, 1500, 2500], [520, 1050, 2700]], float)
BANDWIDTHS = np.array([90.0, 110.0, 170.0])


def pitch_hz(b):
    """The fundamental of pitch bin b: 110 * 2^((b - 4) / 6) Hz, two semitones a bin (69 Hz at bin
    0, 156 Hz at bin 7)."""
    return 110.0 * 2.0 ** ((np.asarray(b, float) - 4) / 6)


def render(speech: np.ndarray, rate: int = RATE, harmonics: int = 40) -> np.ndarray:
    """A source-filter rendering of speech tokens, for listening only: each token is a 40 ms frame;
    the source is a harmonic series at the pitch bin's f0 (:func:`pitch_hz`) with a -6 dB/octave
    glottal tilt, the filter three formant resonances of the phoneme (:data:`FORMANTS`, vowel-like
    values); a pause is silence. Pitch, formants and loudness are smoothed over 10 ms between
    frames. Returns float32 samples in [-1, 1]."""
    speech = np.asarray(speech)
    spoken = is_speech(speech)
    phoneme = np.where(spoken, (speech - SPEECH0) // N_BINS, 0)
    n = int(round(FRAME_S * rate))
    kernel = np.ones(int(0.01 * rate)) / int(0.01 * rate)

    def track(values):
        padded = np.repeat(np.asarray(values, float), n, axis=0)
        return np.stack([np.convolve(col, kernel, mode="same") for col in np.atleast_2d(padded.T)]).T

    f0 = track(np.where(spoken, pitch_hz(np.where(spoken, (speech - SPEECH0) % N_BINS, 4)), 110.0))[:, 0]
    formants = track(FORMANTS[phoneme])
    loudness = track(spoken.astype(float))[:, 0]
    phase = 2 * np.pi * np.cumsum(f0) / rate
    k = np.arange(1, harmonics + 1)[:, None]
    freq = k * f0[None]
    gain = (1 / (1 + ((freq[..., None] - formants[None]) / BANDWIDTHS) ** 2)).sum(-1) / k
    gain[freq > 0.45 * rate] = 0.0
    wave = loudness * (gain * np.sin(k * phase[None])).sum(0)
    peak = np.abs(wave).max()
    return (wave / peak * 0.9 if peak > 0 else wave).astype(np.float32)
