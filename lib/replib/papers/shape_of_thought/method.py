"""The method: one tiny unified decoder over text and image tokens, its block attention mask, the
training loss (next-token cross-entropy on text plus masked-token cross-entropy on every image block,
a discrete stand-in for BAGEL's flow-matching MSE) and the interleaved inference loop.

Every image block is generated in parallel (bidirectional attention inside the block, confidence-
ordered unmasking), as BAGEL generates all latent tokens of an image jointly. The shared
``replib.models.causal_lm`` is a GPT-2 with a causal mask only, so the block mask needs this model.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# The unified vocabulary: text tokens (prompt, rationales, ASSEMBLY), then the 16 codes of a 2x2
# binary patch and MASK; an 8x8 image is IMG_LEN = 16 patch tokens (the task's canvas).
_TEXT = ["PAD", "TABLE", "K2", "K3", "K4", "TOP", "LEG_LEFT", "LEG_RIGHT", "LEG_INTERIOR", "ASSEMBLY"]
VOCAB = _TEXT + [f"P{i}" for i in range(16)] + ["MASK"]
TOK = {name: i for i, name in enumerate(VOCAB)}
IMG0 = TOK["P0"]  # image token of patch code c is IMG0 + c
IMG_LEN = 16

__all__ = [
    "UnifiedDecoder", "block_groups", "attention_mask", "EncodedRecords", "make_training_batch", "sot_loss",
    "unmask_schedule", "generate_image", "generate", "stacked_forward", "train_models", "train_model",
]

PAD, MASK, ASSEMBLY = TOK["PAD"], TOK["MASK"], TOK["ASSEMBLY"]
N_TEXT = IMG0  # text tokens are ids 0 .. IMG0 - 1


class UnifiedDecoder(nn.Module):
    """A pre-LayerNorm transformer (learned absolute positions, GELU MLPs) whose attention follows
    an explicit boolean mask, with one output head over the whole vocabulary (text and image)."""

    def __init__(self, d: int = 64, n_layer: int = 2, n_head: int = 4, max_len: int = 160, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.tok = nn.Embedding(len(VOCAB), d)
            self.pos = nn.Embedding(max_len, d)
            self.layers = nn.ModuleList(_Block(d, n_head) for _ in range(n_layer))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, len(VOCAB))

    def forward(self, ids, pos, mask):
        """Logits ``(B, L, V)`` for token ids and positions ``(B, L)`` under ``mask`` ``(B, L, L)``
        (True where query i may attend to key j)."""
        x = self.tok(ids) + self.pos(pos)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.norm(x))


class _Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        B, L, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, L, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        x = x + self.out(a.transpose(1, 2).reshape(B, L, d))
        return x + self.mlp(self.ln2(x))


def block_groups(is_img) -> np.ndarray:
    """The attention group of each token: its own index for a text token, the index of its block's
    first token for an image token (image blocks are consecutive chunks of ``IMG_LEN`` image
    tokens within a run of image tokens)."""
    is_img = np.asarray(is_img, bool)
    idx = np.arange(len(is_img))
    prev = np.concatenate([[False], is_img[:-1]])
    run_start = np.maximum.accumulate(np.where(is_img & ~prev, idx, 0))
    return np.where(is_img, run_start + (idx - run_start) // IMG_LEN * IMG_LEN, idx)


def attention_mask(group, noisy, valid) -> torch.Tensor:
    """The block attention mask (BAGEL's layout; tensors ``(B, L)``, result ``(B, L, L)``).

    Causal over groups (key group <= query group), so attention is bidirectional inside an image
    block; the noisy copy of a block (its masked tokens, trained to be denoised) sees the clean
    context strictly before its block and itself, and no other token sees any noisy copy. Padding
    keys are hidden; a padding query sees only itself.
    """
    gq, gk = group[:, :, None], group[:, None, :]
    nq, nk = noisy[:, :, None], noisy[:, None, :]
    clean_key = ~nk & torch.where(nq, gk < gq, gk <= gq)
    same_noisy = nq & nk & (gk == gq)
    m = (clean_key | same_noisy) & valid[:, None, :] & valid[:, :, None]
    eye = torch.eye(group.shape[1], dtype=torch.bool, device=group.device)[None]
    return m | (eye & ~valid[:, :, None])


class EncodedRecords:
    """Training records ``[(seq, is_img), ...]`` encoded once as padded arrays, so that a batch is a few
    array operations instead of a Python loop over records: ``seq`` and ``text_target`` ``(N, L)``
    (the next text token at the position before it, from position 1 on; -1 elsewhere), ``group``
    (:func:`block_groups`), ``length``, ``final_start`` (the first token of the final image block) and
    ``state_starts`` ``(N, S)`` (the first tokens of the other image blocks, the SoT states; -1 pads),
    ``n_states``."""

    def __init__(self, records):
        n, L = len(records), max(len(seq) for seq, _ in records)
        self.length = np.array([len(seq) for seq, _ in records])
        self.seq = np.full((n, L), PAD)
        self.group = np.zeros((n, L), int)
        self.text_target = np.full((n, L), -1)
        starts = []
        for r, (seq, is_img) in enumerate(records):
            seq, is_img = np.asarray(seq), np.asarray(is_img, bool)
            m = len(seq)
            g = block_groups(is_img)
            self.seq[r, :m], self.group[r, :m] = seq, g
            nxt = np.arange(1, m)
            self.text_target[r, :m - 1] = np.where(~is_img[nxt] & (nxt >= 2), seq[nxt], -1)
            starts.append(np.unique(g[is_img]))
        self.final_start = np.array([st[-1] for st in starts])
        self.n_states = np.array([len(st) - 1 for st in starts])
        self.state_starts = np.full((n, max(1, self.n_states.max())), -1)
        for r, st in enumerate(starts):
            self.state_starts[r, :len(st) - 1] = st[:-1]

    def __len__(self):
        return len(self.length)


def make_training_batch(records, rng: np.random.Generator, t_min: float = 0.05, idx=None,
                        final_always: bool = True):
    """Training tensors for records ``[(seq, is_img), ...]`` (or an :class:`EncodedRecords` and the
    row indices ``idx`` to draw): each clean sequence followed by noisy copies of its image blocks, a
    fraction ``t ~ U(t_min, 1)`` of each copy's tokens replaced by MASK (at least one).

    Which blocks (image-block matching): with ``final_always`` the final image block every time, plus
    one of the intermediate states drawn uniformly for a record that has them (SoT), so SoT's final
    image is trained as often as direct generation's only image; without it, one block drawn
    uniformly among all of the record's blocks (the earlier scheme, final image 1/(k+2) of the time).
    Returns ids, positions, mask and the loss targets: ``text_target`` (the next text token, predicted
    at the position before it; -1 elsewhere) and ``img_target`` (the clean token at each masked
    position of a noisy copy; -1 elsewhere)."""
    enc = records if isinstance(records, EncodedRecords) else EncodedRecords(records)
    idx = np.arange(len(enc)) if idx is None else np.asarray(idx)
    B = len(idx)
    length, n_states = enc.length[idx], enc.n_states[idx]
    if final_always:  # noisy copy 0: the final image; copy 1: a state, where there is one
        pick = np.minimum((rng.random(B) * n_states).astype(int), np.maximum(n_states - 1, 0))
        starts = np.stack([enc.final_start[idx], enc.state_starts[idx, pick]], 1)
        n_noisy = 1 + (n_states > 0)
    else:  # one block among the states and the final image
        pick = (rng.random(B) * (n_states + 1)).astype(int)
        all_starts = np.concatenate([enc.state_starts[idx], np.full((B, 1), -1)], 1)
        all_starts[np.arange(B), n_states] = enc.final_start[idx]
        starts = np.stack([all_starts[np.arange(B), pick], np.full(B, -1)], 1)
        n_noisy = np.ones(B, int)
    t = rng.uniform(t_min, 1.0, size=(B, 2))
    masked = rng.random((B, 2, IMG_LEN)) < t[..., None]
    masked[np.arange(B)[:, None], np.arange(2)[None], rng.integers(IMG_LEN, size=(B, 2))] = True
    total = length + IMG_LEN * n_noisy
    L = int(total.max())
    Ls = min(L, enc.seq.shape[1])
    ids = np.full((B, L), PAD)
    pos = np.zeros((B, L), int)
    grp = np.full((B, L), L + 1)
    noisy = np.zeros((B, L), bool)
    img_t = np.full((B, L), -1)
    text_t = np.full((B, L), -1)
    clean_cols = np.arange(Ls)[None] < length[:, None]
    ids[:, :Ls] = np.where(clean_cols, enc.seq[idx, :Ls], PAD)
    pos[:, :Ls] = np.where(clean_cols, np.arange(Ls)[None], 0)
    grp[:, :Ls] = np.where(clean_cols, enc.group[idx, :Ls], L + 1)
    text_t[:, :Ls] = np.where(clean_cols, enc.text_target[idx, :Ls], -1)
    j = np.arange(IMG_LEN)
    for c in range(2):
        rows = np.nonzero(n_noisy > c)[0]
        st = starts[rows, c]
        cols = (length[rows] + c * IMG_LEN)[:, None] + j
        blk = enc.seq[idx[rows]][np.arange(len(rows))[:, None], st[:, None] + j]
        m = masked[rows, c]
        r2 = rows[:, None]
        ids[r2, cols] = np.where(m, MASK, blk)
        pos[r2, cols] = st[:, None] + j
        grp[r2, cols] = st[:, None]
        noisy[r2, cols] = True
        img_t[r2, cols] = np.where(m, blk, -1)
    valid = torch.as_tensor(np.arange(L)[None] < total[:, None])
    grp_t, noisy_t = torch.as_tensor(grp), torch.as_tensor(noisy)
    return dict(ids=torch.as_tensor(ids), pos=torch.as_tensor(pos), mask=attention_mask(grp_t, noisy_t, valid),
                text_target=torch.as_tensor(text_t), img_target=torch.as_tensor(img_t))


def _masked_ce(logits, target, lo: int, hi: int):
    """Mean cross-entropy of ``logits[..., lo:hi]`` against ``target - lo`` over the positions where
    ``target >= 0`` (0 where there are none); written with masks, not boolean indexing, so that it
    runs under ``torch.func.vmap``."""
    keep = target >= 0
    logp = F.log_softmax(logits[..., lo:hi], -1)
    nll = -logp.gather(-1, torch.where(keep, target - lo, 0)[..., None])[..., 0]
    return (nll * keep).sum() / keep.sum().clamp(min=1)


def sot_loss(logits, batch, w_ce: float = 1.0, w_img: float = 1.0, parts: bool = False):
    """L = w_ce CE_text + w_img CE_img (the release loss w_ce CE + w_mse MSE, both weights 1, with
    the flow-matching MSE replaced by cross-entropy on masked image tokens). Text logits are
    restricted to the text vocabulary, image logits to the 16 patch codes; each CE is the mean over
    its labelled positions. With ``parts`` also returns ``(ce_text, ce_img)``."""
    ce_text = _masked_ce(logits, batch["text_target"], 0, N_TEXT)
    ce_img = _masked_ce(logits, batch["img_target"], IMG0, IMG0 + 16)
    loss = w_ce * ce_text + w_img * ce_img
    return (loss, (ce_text, ce_img)) if parts else loss


def unmask_schedule(n_tokens: int, rounds: int) -> list[int]:
    """How many tokens are revealed in each of ``rounds`` parallel decoding rounds (a linear
    schedule: after round s, ceil(n s / rounds) are known)."""
    done = [math.ceil(n_tokens * s / rounds) for s in range(rounds + 1)]
    return [b - a for a, b in zip(done, done[1:])]


def _device_of(model) -> torch.device:
    return next(model.parameters()).device


def _draw(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One index per row of ``probs`` (``(n, k)``), drawn with ``gen`` on the generator's own device
    (the CPU), so a seed means the same draws whatever device the model is on."""
    return torch.multinomial(probs.to(gen.device), 1, generator=gen).to(probs.device)


def _forward_last(model, seqs, flags, extra_block: bool):
    """Logits of right-padded clean sequences (lists of ids and image flags), on the model's device;
    with ``extra_block`` the last ``IMG_LEN`` tokens are one image block (they attend to each other)."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), PAD)
    grp = torch.full((len(seqs), L), L + 1)
    valid = torch.zeros(len(seqs), L, dtype=torch.bool)
    for b, (s, f) in enumerate(zip(seqs, flags)):
        ids[b, :len(s)] = torch.as_tensor(s)
        grp[b, :len(s)] = torch.as_tensor(block_groups(f))
        valid[b, :len(s)] = True
    where = _device_of(model)
    ids, grp, valid = ids.to(where), grp.to(where), valid.to(where)
    pos = torch.arange(L, device=where).expand(len(seqs), L)
    mask = attention_mask(grp, torch.zeros_like(valid), valid)
    return model(ids, pos, mask)


def generate_image(model, seqs, flags, rounds: int, temperature: float, gen: torch.Generator):
    """Parallel image generation for a batch of contexts: append ``IMG_LEN`` MASK tokens as one
    block, then in each of ``rounds`` rounds sample every masked token at ``temperature`` and keep
    the most confident ones (the number from :func:`unmask_schedule`). Returns ``(B, IMG_LEN)``."""
    B, where = len(seqs), _device_of(model)
    block = torch.full((B, IMG_LEN), MASK, device=where)
    lens = [len(s) for s in seqs]
    for n_new in unmask_schedule(IMG_LEN, rounds):
        full = [s + block[b].tolist() for b, s in enumerate(seqs)]
        fl = [f + [True] * IMG_LEN for f in flags]
        logits = _forward_last(model, full, fl, True)
        idx = torch.as_tensor(lens, device=where)[:, None] + torch.arange(IMG_LEN, device=where)
        lg = logits.gather(1, idx[..., None].expand(-1, -1, logits.shape[-1]))[..., IMG0:IMG0 + 16]
        probs = F.softmax(lg / temperature, -1)
        draw = _draw(probs.reshape(-1, 16), gen).view(B, IMG_LEN)
        conf = probs.gather(-1, draw[..., None])[..., 0]
        conf = torch.where(block == MASK, conf, -1.0)
        keep = conf.topk(n_new, dim=1).indices
        block.scatter_(1, keep, (draw + IMG0).gather(1, keep))
    return block


def generate(model, variant: str, prompts, *, img_rounds: int, img_temperature: float,
             text_temperature: float = 0.3, max_steps: int = 6, seed: int = 0):
    """The release inference loop, batched: sample a text token (temperature 0.3); for SoT, unless it
    is ASSEMBLY, generate the state image it announces and append it; repeat until ASSEMBLY (or
    ``max_steps`` rationales), then generate the final image. The model decides when to stop.
    Returns per prompt a dict with the rationale tokens, the intermediate states and the final image
    (token arrays). Works on the model's device; the draws come from a CPU generator."""
    gen = torch.Generator().manual_seed(seed)
    where = _device_of(model)
    seqs = [list(p) for p in prompts]
    flags = [[False] * len(p) for p in prompts]
    out = [dict(rationales=[], states=[]) for _ in prompts]
    active = list(range(len(seqs)))
    with torch.no_grad():
        for _ in range(max_steps + 1):
            if not active:
                break
            logits = _forward_last(model, [seqs[b] for b in active], [flags[b] for b in active], False)
            last = torch.as_tensor([len(seqs[b]) - 1 for b in active], device=where)
            lg = logits[torch.arange(len(active), device=where), last, :N_TEXT]
            lg[:, :TOK["TOP"]] = -math.inf  # only rationale or ASSEMBLY tokens may follow
            tok = _draw(F.softmax(lg / text_temperature, -1), gen)[:, 0].tolist()
            still = []
            for b, t in zip(active, tok):
                if len(out[b]["rationales"]) >= max_steps:
                    t = ASSEMBLY
                seqs[b].append(t)
                flags[b].append(False)
                if t != ASSEMBLY:
                    out[b]["rationales"].append(t)
                    still.append(b)
            if variant == "sot" and still:
                imgs = generate_image(model, [seqs[b] for b in still], [flags[b] for b in still],
                                      img_rounds, img_temperature, gen)
                for b, img in zip(still, imgs.tolist()):
                    seqs[b] += img
                    flags[b] += [True] * IMG_LEN
                    out[b]["states"].append(np.array(img))
            active = still
        finals = generate_image(model, seqs, flags, img_rounds, img_temperature, gen)
    for o, f in zip(out, finals.cpu().numpy()):
        o["final"] = f
    return out


def stacked_forward(params, ids, pos, mask, n_head: int = 4):
    """:class:`UnifiedDecoder`'s forward for ``S`` models at once: ``params`` are their parameters
    stacked along a leading seed axis (``torch.func.stack_module_state``), ``ids``/``pos`` are
    ``(S, B, L)`` and ``mask`` ``(S, B, L, L)``. Linear layers are batched matrix products over the
    seed axis and attention folds the seeds into torch's fused kernel's batch (``torch.func.vmap``
    would run that kernel once per seed: it has no batching rule). Returns ``(S, B, L, V)``."""
    S, B, L = ids.shape
    seed = torch.arange(S, device=ids.device)[:, None, None]

    def linear(x, name):
        return torch.einsum("sbli,soi->sblo", x, params[name + ".weight"]) + params[name + ".bias"][:, None, None]

    def norm(x, name):
        return (F.layer_norm(x, x.shape[-1:]) * params[name + ".weight"][:, None, None]
                + params[name + ".bias"][:, None, None])

    x = params["tok.weight"][seed, ids] + params["pos.weight"][seed, pos]
    d = x.shape[-1]
    n_layer = len({key.split(".")[1] for key in params if key.startswith("layers.")})
    for i in range(n_layer):
        pre = f"layers.{i}."
        qkv = linear(norm(x, pre + "ln1"), pre + "qkv").view(S * B, L, 3, n_head, d // n_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.reshape(S * B, 1, L, L))
        x = x + linear(a.transpose(1, 2).reshape(S, B, L, d), pre + "out")
        h = F.gelu(linear(norm(x, pre + "ln2"), pre + "mlp.0"))
        x = x + linear(h, pre + "mlp.2")
    return linear(norm(x, "norm"), "head")


def _pad_batch(batch, L: int):
    """Right-pad a batch of :func:`make_training_batch` to length ``L`` (padding ids PAD, no targets,
    each padding query attending to itself only, as the mask does for padding)."""
    n = L - batch["ids"].shape[1]
    if n == 0:
        return batch
    out = {key: F.pad(batch[key], (0, n), value=PAD if key == "ids" else (0 if key == "pos" else -1))
           for key in ("ids", "pos", "text_target", "img_target")}
    B, L0 = batch["ids"].shape
    mask = torch.zeros(B, L, L, dtype=torch.bool)
    mask[:, :L0, :L0] = batch["mask"]
    mask[:, torch.arange(L0, L), torch.arange(L0, L)] = True
    out["mask"] = mask
    return out


def train_models(records_per_seed, seeds, *, steps: int, batch_size: int = 32, lr: float = 3e-3,
                 d: int = 64, n_layer: int = 2, warmup: int = 50, device: str = "cpu",
                 final_always: bool = True):
    """Train one :class:`UnifiedDecoder` per seed, all at once: the seeds' models are stacked
    (``torch.func.stack_module_state``) and run as one batched model (:func:`stacked_forward`; the
    per-seed losses by ``torch.func.vmap``), each on batches of its own records drawn with
    ``default_rng(seed)``.
    Per seed this is exactly the single-model recipe: AdamW (betas 0.9, 0.95, decay 0.01, as the
    release; elementwise, so stacking changes nothing), linear warm-up then cosine decay to 5% of
    ``lr``, gradient-norm clip 1.0 computed per seed. Returns the models and the loss per seed and step
    (``(n_seeds, steps)``)."""
    from torch.func import stack_module_state, vmap

    models = [UnifiedDecoder(d=d, n_layer=n_layer, seed=seed) for seed in seeds]
    params, _ = stack_module_state(models)
    params = {key: value.to(device).detach().requires_grad_() for key, value in params.items()}
    per_seed_loss = vmap(lambda logits, text_target, img_target: sot_loss(
        logits, dict(text_target=text_target, img_target=img_target)))
    encoded = [EncodedRecords(records) for records in records_per_seed]
    rngs = [np.random.default_rng(seed) for seed in seeds]
    opt = torch.optim.AdamW(params.values(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    losses = np.zeros((len(seeds), steps))
    for step in range(steps):
        scale = min(1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in opt.param_groups:
            group["lr"] = lr * scale
        batches = []
        for enc, rng in zip(encoded, rngs):
            batches.append(make_training_batch(enc, rng, idx=rng.integers(len(enc), size=batch_size),
                                               final_always=final_always))
        L = max(b["ids"].shape[1] for b in batches)
        batches = [_pad_batch(b, L) for b in batches]
        stacked = {key: torch.stack([b[key] for b in batches]).to(device) for key in batches[0]}
        logits = stacked_forward(params, stacked["ids"], stacked["pos"], stacked["mask"])
        loss = per_seed_loss(logits, stacked["text_target"], stacked["img_target"])
        opt.zero_grad()
        loss.sum().backward()  # the seeds' parameters are disjoint: each gets its own loss's gradient
        with torch.no_grad():  # clip_grad_norm_(max_norm=1) per seed
            grads = [p.grad for p in params.values()]
            norm = torch.sqrt(sum((g.reshape(len(seeds), -1) ** 2).sum(1) for g in grads))
            factor = (1.0 / (norm + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.mul_(factor.view(-1, *[1] * (g.dim() - 1)))
        opt.step()
        losses[:, step] = loss.detach().cpu().numpy()
    out = []
    for s in range(len(seeds)):
        model = UnifiedDecoder(d=d, n_layer=n_layer, seed=seeds[s]).to(device)
        model.load_state_dict({key: value[s].detach() for key, value in params.items()}, strict=False)
        out.append(model)
    return out, losses


def train_model(records, *, steps: int, batch_size: int = 32, lr: float = 3e-3, d: int = 64,
                n_layer: int = 2, seed: int = 0, warmup: int = 50, device: str = "cpu",
                final_always: bool = True):
    """Train a :class:`UnifiedDecoder` on batches of ``records`` drawn with ``default_rng(seed)``
    (:func:`train_models` with one seed): AdamW (betas 0.9, 0.95, as the release), linear warm-up then
    cosine decay to 5% of ``lr``, gradient-norm clip 1.0. Returns the model and the loss per step."""
    models, losses = train_models([records], [seed], steps=steps, batch_size=batch_size, lr=lr, d=d,
                                  n_layer=n_layer, warmup=warmup, device=device, final_always=final_always)
    return models[0], losses[0].tolist()
