"""CA-SOADD, the toy world: bona fide speech-like audio from a numpy source-filter synthesiser,
five resynthesis attacks, the structure-destroying probe operators, the benign view, and the
frozen front-end that turns a waveform into L "layers" of frame features.

Everything is at ``SR = 8000`` Hz, 1 s clips; frequencies of the operators are normalised (cycles
per sample, as in the official code's probe pool), so nothing depends on the sample rate.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_toeplitz
from scipy.signal import istft, lfilter, stft

__all__ = [
    "SR",
    "N_SAMPLES",
    "ATTACKS",
    "PROBE_DISTANT",
    "PROBES_STRUCTURE",
    "PROBES_WITH_IDINV",
    "draw_speaker",
    "synthesise",
    "bona_fide",
    "attack",
    "build_corpus",
    "probe",
    "benign_view",
    "FrontEnd",
]

SR = 8000
N_SAMPLES = 8000
FRAME = 80  # resonators are updated every 10 ms
# F1, F2, F3 (Hz) of six vowels (adult-male averages, scaled by the speaker's vocal-tract factor)
VOWELS = np.array([[730, 1090, 2440], [530, 1840, 2480], [270, 2290, 3010],
                   [570, 840, 2410], [300, 870, 2240], [660, 1720, 2410]], dtype=float)
BANDWIDTHS = np.array([60.0, 90.0, 120.0])

# A4 (splicing) resembles the Perm probe; the others are mechanistically distinct from every probe
ATTACKS = ("griffin_lim", "lpc_buzz", "oversmoothed", "harmonic", "splice")
PROBE_DISTANT = ("griffin_lim", "lpc_buzz", "oversmoothed", "harmonic")
PROBES_STRUCTURE = ("perm", "phase_scr", "spec_mask", "resamp")
PROBES_WITH_IDINV = PROBES_STRUCTURE + ("idinv",)


# ---- the bona fide synthesiser -------------------------------------------------------------------


def draw_speaker(rng: np.random.Generator) -> dict:
    """A speaker: F0 log-uniform in 90-230 Hz, vocal-tract scale U(0.85, 1.15), and the speaker's
    micro-variation (jitter 0.5-1.5 %, shimmer 2-6 %, glottal tilt U(0.90, 0.97), breath -25..-15 dB)."""
    return dict(f0=float(np.exp(rng.uniform(np.log(90), np.log(230)))),
                tract=float(rng.uniform(0.85, 1.15)), jitter=float(rng.uniform(0.005, 0.015)),
                shimmer=float(rng.uniform(0.02, 0.06)), tilt=float(rng.uniform(0.90, 0.97)),
                breath_db=float(rng.uniform(-25, -15)))


def _tracks(rng: np.random.Generator, spk: dict):
    """Per-frame control tracks of one utterance: F0 (Hz per sample), the formant targets
    (frames x 3, Hz) with 30 ms transitions, and a per-frame fricative flag."""
    n_frames = N_SAMPLES // FRAME
    t = np.arange(N_SAMPLES) / N_SAMPLES
    f0 = spk["f0"] * (1 - 0.15 * t) * (1 + 0.02 * np.sin(2 * np.pi * 2 * t + rng.uniform(0, 6.3)))
    for _ in range(rng.integers(1, 3)):  # 1-2 raised-cosine accents of +10-25 %
        c, w, h = rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.25), rng.uniform(0.10, 0.25)
        f0 *= 1 + h * np.where(np.abs(t - c) < w, 0.5 * (1 + np.cos(np.pi * (t - c) / w)), 0.0)
    formants, fric = np.zeros((n_frames, 3)), np.zeros(n_frames, bool)
    start = 0
    while start < n_frames:
        length = int(rng.integers(10, 26))  # 100-250 ms segments
        is_fric = rng.random() < 0.1
        target = VOWELS[rng.integers(len(VOWELS))] * spk["tract"]
        if is_fric:
            target = np.array([rng.uniform(2000, 3500)] * 3)
        formants[start:start + length] = target
        fric[start:start + length] = is_fric
        start += length
    kernel = np.ones(3) / 3  # 30 ms transitions
    formants = np.stack([np.convolve(np.pad(f, 1, mode="edge"), kernel, "valid") for f in formants.T], 1)
    return f0, formants, fric


def _moving_average(x: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average with edge padding (width >= 1)."""
    if width <= 1:
        return x
    pad = np.pad(x, (width // 2, width - 1 - width // 2), mode="edge")
    return np.convolve(pad, np.ones(width) / width, "valid")


def _glottal_source(rng, f0, spk, jitter, shimmer):
    """Pulse train with per-cycle period jitter and amplitude shimmer, through a one-pole tilt."""
    src = np.zeros(N_SAMPLES)
    pos = 0.0
    while pos < N_SAMPLES:
        i = int(pos)
        src[i] = 1.0 + shimmer * rng.standard_normal()
        pos += SR / f0[i] * (1.0 + jitter * rng.standard_normal())
    return lfilter([1.0], [1.0, -spk["tilt"]], src)


def _resonate(excitation, formants):
    """Three cascaded two-pole resonators, coefficients updated every 10 ms, filter state carried."""
    out = excitation.copy()
    for k in range(3):
        zi = np.zeros(2)
        y = np.empty_like(out)
        for j in range(len(formants)):
            r = np.exp(-np.pi * BANDWIDTHS[k] / SR)
            theta = 2 * np.pi * min(formants[j, k], 0.45 * SR) / SR
            a = [1.0, -2 * r * np.cos(theta), r * r]
            seg = slice(j * FRAME, (j + 1) * FRAME)
            y[seg], zi = lfilter([1 - r], a, out[seg], zi=zi)
        out = y
    return out


def _finish(rng, x):
    """Level to -20 dBFS +-3 dB and add a noise floor at 45-55 dB SNR (real and attacks alike)."""
    x = x / (np.sqrt(np.mean(x**2)) + 1e-12) * 10 ** ((-20 + rng.uniform(-3, 3)) / 20)
    floor = np.sqrt(np.mean(x**2)) * 10 ** (-rng.uniform(45, 55) / 20)
    return (x + floor * rng.standard_normal(len(x))).astype(np.float32)


def synthesise(rng, spk, regular=False, smooth_ms=0, return_f0=False):
    """One utterance of speaker ``spk``. ``regular`` removes jitter, shimmer and breath (the
    attacks' too-regular source); ``smooth_ms`` smooths F0 and formant tracks (oversmoothing)."""
    f0, formants, fric = _tracks(rng, spk)
    if smooth_ms:
        f0 = _moving_average(f0, smooth_ms * SR // 1000)
        formants = np.stack([_moving_average(f, smooth_ms // 10) for f in formants.T], 1)
    jit, shim = (0.0, 0.0) if regular else (spk["jitter"], spk["shimmer"])
    voiced = _glottal_source(rng, f0, spk, jit, shim)
    voiced /= np.sqrt(np.mean(voiced**2)) + 1e-12
    breath = 10 ** ((-40 if regular else spk["breath_db"]) / 20) * rng.standard_normal(N_SAMPLES)
    fric_mask = np.repeat(fric, FRAME).astype(float)
    excitation = (1 - fric_mask) * (voiced + breath) + fric_mask * 0.5 * rng.standard_normal(N_SAMPLES)
    x = _finish(rng, _resonate(excitation, formants))
    return (x, f0) if return_f0 else x


def bona_fide(rng):
    """A bona fide clip: a new speaker, one natural utterance."""
    return synthesise(rng, draw_speaker(rng))


# ---- attacks (never seen in training) ------------------------------------------------------------


def _griffin_lim(rng, x, iters=16):
    """A1: phase reconstruction from the STFT magnitude (n_fft 256, hop 64, random initial phase);
    ``x`` is one clip or a batch (clips x samples), reconstructed all at once."""
    kw = dict(nperseg=256, noverlap=192)
    mag = np.abs(stft(x, **kw)[2])
    spec = mag * np.exp(2j * np.pi * rng.random(mag.shape))
    for _ in range(iters):
        y = istft(spec, **kw)[1][..., :N_SAMPLES]
        spec = mag * np.exp(1j * np.angle(stft(y, **kw)[2]))
    return istft(spec, **kw)[1][..., :N_SAMPLES]


def _lpc_buzz(rng, x, f0, order=12, frame=160):
    """A2: order-12 LPC per 20 ms frame, excited by a strictly periodic impulse train at the true F0
    (no jitter, shimmer or breath), gain matched to the LPC residual."""
    pulses = np.zeros(N_SAMPLES)
    pos = 0.0
    while pos < N_SAMPLES:
        pulses[int(pos)] = 1.0
        pos += SR / f0[int(pos)]
    pulses *= np.sqrt(SR / f0.mean())
    y, zi = np.zeros(N_SAMPLES), np.zeros(order)
    for s in range(0, N_SAMPLES, frame):
        seg = x[s:s + frame] * np.hanning(frame)
        r = np.correlate(seg, seg, "full")[frame - 1:frame + order] + 1e-9
        a = solve_toeplitz(r[:order], r[1:order + 1])
        gain = np.sqrt(max(r[0] - a @ r[1:order + 1], 1e-12) / frame)
        y[s:s + frame], zi = lfilter([gain], np.r_[1.0, -a], pulses[s:s + frame], zi=zi)
    return y


def _harmonic(rng, x, f0, n_ceps=20, n_fft=256, hop=64):
    """A5: harmonic vocoder. Harmonics k f0(t) (below Nyquist), phase-coherent (the phase of each is
    k times the running F0 phase), amplitudes read from the cepstrally smoothed spectral envelope (20
    coefficients) of the source clip per 8 ms frame; no noise component."""
    _, _, S = stft(x, nperseg=n_fft, noverlap=n_fft - hop)
    ceps = np.fft.irfft(np.log(np.abs(S) + 1e-8), axis=0)
    ceps[n_ceps:-n_ceps + 1] = 0  # lifter: keep the first 20 coefficients (and their mirror)
    env = np.exp(np.fft.rfft(ceps, axis=0).real)  # bins x frames
    frame_t = np.arange(env.shape[1]) * hop
    phase = 2 * np.pi * np.cumsum(f0) / SR
    k = np.arange(1, int(SR / 2 / f0.min()) + 1)[:, None]
    bins = k * f0[None, :] / SR * n_fft  # harmonics x samples, fractional bin
    frame = np.interp(np.arange(N_SAMPLES), frame_t, np.arange(len(frame_t)))
    lo = np.clip(np.floor(bins).astype(int), 0, n_fft // 2)
    hi = np.clip(lo + 1, 0, n_fft // 2)
    fi = np.clip(np.round(frame).astype(int), 0, env.shape[1] - 1)[None, :]
    w = bins - np.floor(bins)
    amp = (1 - w) * env[lo, fi] + w * env[hi, fi]
    amp = np.where(bins < n_fft / 2, amp, 0.0)
    return (amp * np.cos(k * phase[None, :])).sum(0)


def _splice(rng, spk):
    """A4: 60-120 ms chunks from three utterances of the same speaker, 5 ms crossfades."""
    sources = [synthesise(rng, spk) for _ in range(3)]
    fade = 40
    out, pos = np.zeros(N_SAMPLES + 2000), 0
    ramp = np.linspace(0, 1, fade)
    while pos < N_SAMPLES:
        n = int(rng.integers(480, 961))
        src = sources[rng.integers(3)]
        start = int(rng.integers(0, N_SAMPLES - n))
        chunk = src[start:start + n].astype(float)
        if pos:
            chunk[:fade] *= ramp
            out[pos - fade:pos] *= ramp[::-1]
            pos -= fade
        out[pos:pos + n] += chunk
        pos += n
    return out[:N_SAMPLES]


def attack(rng, name):
    """One spoofed clip of attack ``name`` (a fresh speaker), with the same level and noise floor
    as bona fide audio. A3 re-renders with the same synthesiser, regular source, 150 ms smoothing."""
    return attacks(rng, name, 1)[0]


def attacks(rng, name, n):
    """``n`` spoofed clips of attack ``name`` (clips x samples, float32), each from a fresh speaker.
    Griffin-Lim runs on the whole batch at once (the same per-clip operation, vectorised)."""
    if name == "griffin_lim":
        src = np.stack([synthesise(rng, draw_speaker(rng)) for _ in range(n)]).astype(np.float64)
        return np.stack([_finish(rng, y) for y in _griffin_lim(rng, src)]).reshape(n, N_SAMPLES)
    out = []
    for _ in range(n):
        spk = draw_speaker(rng)
        if name == "oversmoothed":
            out.append(synthesise(rng, spk, regular=True, smooth_ms=150))
        elif name == "splice":
            out.append(_finish(rng, _splice(rng, spk)))
        elif name in ("lpc_buzz", "harmonic"):
            x, f0 = synthesise(rng, spk, return_f0=True)
            out.append(_finish(rng, (_lpc_buzz if name == "lpc_buzz" else _harmonic)(rng, x, f0)))
        else:
            raise ValueError(f"unknown attack {name!r}")
    return np.stack(out)


def build_corpus(seed: int, n_train: int, n_dev: int, n_test: int, n_sup: int = 0) -> dict:
    """Columns of the corpus: ``split`` (train / dev / test / sup), ``label`` (bona_fide or an attack
    name) and ``wave`` (float32, 8000 samples). Only the test and sup splits hold attacks; ``sup``
    (``n_sup`` clips of each probe-distant attack, other speakers than the test clips) trains the
    supervised reference only and never touches a one-class model."""
    rng = np.random.default_rng(seed)
    rows = {"split": [], "label": [], "wave": []}
    plan = [("train", "bona_fide", n_train), ("dev", "bona_fide", n_dev), ("test", "bona_fide", n_test)]
    plan += [("test", a, n_test) for a in ATTACKS] + [("sup", a, n_sup) for a in PROBE_DISTANT]
    for split, label, n in plan:
        if n == 0:
            continue
        waves = np.stack([bona_fide(rng) for _ in range(n)]) if label == "bona_fide" else attacks(rng, label, n)
        rows["split"] += [split] * n
        rows["label"] += [label] * n
        rows["wave"] += list(waves.astype(np.float32))
    return rows


# ---- probes and the benign view (operators on bona fide waveforms) -------------------------------


def probe(rng, x: np.ndarray, name: str) -> np.ndarray:
    """An off-manifold probe A(x) of the official code's pool (batch ``x``: clips x samples).

    ``perm``: 8 equal segments shuffled; ``phase_scr``: rFFT magnitude kept, phases uniform;
    ``spec_mask``: one contiguous 10 % block of rFFT bins zeroed; ``resamp``: linear interpolation
    down by 3 and back up; ``idinv``: one of low-pass (cutoff in {0.20 .. 0.40} cycles/sample), white
    noise at U[28, 40] dB SNR, or soft clip tanh(g x)/tanh(g), g ~ U[1.2, 2.5]."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    if name == "perm":
        segs = np.split(x[..., : n - n % 8], 8, axis=-1)
        return np.concatenate([segs[i] for i in rng.permutation(8)], axis=-1)
    if name in ("phase_scr", "spec_mask"):
        X = np.fft.rfft(x, axis=-1)
        if name == "phase_scr":
            X = np.abs(X) * np.exp(2j * np.pi * rng.random(X.shape))
        else:
            w = int(0.1 * X.shape[-1])
            s = int(rng.integers(0, X.shape[-1] - w))
            X[..., s:s + w] = 0
        return np.fft.irfft(X, n=n, axis=-1)
    if name == "resamp":
        t = np.arange(n)
        coarse = t[::3]
        return np.stack([np.interp(t, coarse, row[::3]) for row in x.reshape(-1, n)]).reshape(x.shape)
    if name == "idinv":
        kind = rng.integers(3)
        if kind == 0:
            X = np.fft.rfft(x, axis=-1)
            X[..., int(rng.choice([0.20, 0.25, 0.30, 0.35, 0.40]) * 2 * X.shape[-1]):] = 0
            return np.fft.irfft(X, n=n, axis=-1)
        if kind == 1:
            rms = np.sqrt(np.mean(x**2, axis=-1, keepdims=True))
            return x + rms * 10 ** (-rng.uniform(28, 40) / 20) * rng.standard_normal(x.shape)
        g = rng.uniform(1.2, 2.5)
        peak = np.abs(x).max(axis=-1, keepdims=True) + 1e-12
        return np.tanh(g * x / peak) / np.tanh(g) * peak
    raise ValueError(f"unknown probe {name!r}")


def benign_view(rng, x: np.ndarray, kappa: float = 0.05) -> np.ndarray:
    """The benign view T(x): gain U[0.5, 1.5] per clip, white noise of std kappa * RMS(x), and one
    random contiguous 10 % of the samples zeroed (kappa = 0.05 per [S], 0.1 in [C])."""
    x = np.asarray(x, dtype=np.float64)
    b, n = x.shape
    rms = np.sqrt(np.mean(x**2, axis=-1, keepdims=True))
    y = x * rng.uniform(0.5, 1.5, (b, 1)) + kappa * rms * rng.standard_normal(x.shape)
    w = n // 10
    for i, s in enumerate(rng.integers(0, n - w, b)):
        y[i, s:s + w] = 0
    return y


# ---- the frozen front-end (stand-in for the SSL encoder's layers) --------------------------------


def _mel_bank(n_mels: int, n_fft: int) -> np.ndarray:
    """Triangular mel filters (n_mels x n_fft // 2 + 1)."""
    mel = np.linspace(0, 2595 * np.log10(1 + SR / 2 / 700), n_mels + 2)
    edges = 700 * (10 ** (mel / 2595) - 1) / SR * n_fft
    bins = np.arange(n_fft // 2 + 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    return np.clip(np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)), 0, None)


class FrontEnd:
    """Frozen front-end: STFT (n_fft 256, hop 80), L = 4 layers per frame: log-mel (40), delta
    log-mel, LFCC (20 coefficients of the log linear spectrum) and the instantaneous-frequency
    deviation per mel band (a phase cue). Each layer is standardised with bona fide training
    statistics (:meth:`fit`) and mapped to ``d`` by a frozen random linear map and tanh."""

    n_fft, n_lfcc = 256, 20

    def __init__(self, d: int = 64, seed: int = 0, hop: int = 80, n_mels: int = 40):
        rng = np.random.default_rng(seed)
        self.hop, self.n_mels = hop, n_mels
        self.mel = _mel_bank(self.n_mels, self.n_fft)
        k = np.arange(self.n_fft // 2 + 1)
        self.dct = np.cos(np.pi / len(k) * (k[None, :] + 0.5) * np.arange(self.n_lfcc)[:, None])
        win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(self.n_fft) / self.n_fft)  # periodic Hann
        self.window = win / win.sum()
        self.expected = 2 * np.pi * hop * k / self.n_fft
        dims = [self.n_mels, self.n_mels, self.n_lfcc, self.n_mels]
        self.maps = [rng.standard_normal((m, d)) / np.sqrt(m) for m in dims]
        self.stats = None

    def raw_layers(self, x: np.ndarray) -> list[np.ndarray]:
        """The four raw layers of a batch (clips x samples), each clips x frames x features. The STFT
        is scipy's (periodic Hann window, spectrum scaling, no padding), computed on strided frames
        with one real FFT; the phase deviation is wrapped to [-pi, pi) arithmetically."""
        frames = np.lib.stride_tricks.sliding_window_view(np.asarray(x, dtype=np.float64), self.n_fft, axis=-1)
        frames = frames[..., ::self.hop, :]
        S = np.fft.rfft(frames * self.window, axis=-1)  # clips x frames x bins
        power = (S.real**2 + S.imag**2) + 1e-10
        mel_power = power @ self.mel.T
        logmel = np.log(mel_power + 1e-8)
        delta = np.diff(logmel, axis=1, prepend=logmel[:, :1])
        lfcc = np.log(power) @ self.dct.T
        phase = np.angle(S)
        dphi = np.diff(phase, axis=1, prepend=phase[:, :1]) - self.expected
        dev = np.abs(np.mod(dphi + np.pi, 2 * np.pi) - np.pi)
        ifd = (dev * power) @ self.mel.T / mel_power
        return [logmel, delta, lfcc, ifd]

    def fit(self, x: np.ndarray) -> FrontEnd:
        """Standardisation statistics per layer and feature, from bona fide training clips only."""
        self.stats = [(r.mean((0, 1)), r.std((0, 1)) + 1e-6) for r in self.raw_layers(x)]
        return self

    def __call__(self, x: np.ndarray, batch: int = 256) -> np.ndarray:
        """Layer features of a batch of clips: float32 array clips x L x frames x d."""
        out = []
        for s in range(0, len(x), batch):
            layers = self.raw_layers(np.asarray(x[s:s + batch], dtype=np.float64))
            # the standardisation folded into the map: ((r - m) / sd) @ w = r @ (w / sd) - (m / sd) @ w
            out.append(np.stack([np.tanh(r.astype(np.float32) @ (w / sd[:, None]).astype(np.float32)
                                         - ((m / sd) @ w).astype(np.float32))
                                 for r, (m, sd), w in zip(layers, self.stats, self.maps)], 1))
        return np.concatenate(out)
