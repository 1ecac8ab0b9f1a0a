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
    "UnifiedDecoder", "block_groups", "attention_mask", "make_training_batch", "sot_loss",
    "unmask_schedule", "generate_image", "generate", "train_model",
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


def make_training_batch(records, rng: np.random.Generator, t_min: float = 0.05):
    """Training tensors for records ``[(seq, is_img), ...]``: each clean sequence followed by a
    noisy copy of one of its image blocks (drawn uniformly), a fraction ``t ~ U(t_min, 1)`` of its
    tokens replaced by MASK (at least one). Returns ids, positions, mask and the loss targets: ``text_target`` (the next
    text token, predicted at the position before it; -1 elsewhere) and ``img_target`` (the clean
    token at each masked position of a noisy copy; -1 elsewhere)."""
    rows = []
    for seq, is_img in records:
        seq, is_img = np.asarray(seq), np.asarray(is_img, bool)
        g, n = block_groups(is_img), len(seq)
        text_t = np.full(n, -1)
        nxt = np.arange(1, n)
        text_t[:-1] = np.where(~is_img[nxt] & (nxt >= 2), seq[nxt], -1)
        ids, pos, grp, noisy, img_t = [seq], [np.arange(n)], [g], [np.zeros(n, bool)], [np.full(n, -1)]
        for start in [rng.choice(np.unique(g[is_img]))]:
            blk = seq[start:start + IMG_LEN]
            t = rng.uniform(t_min, 1.0)
            masked = rng.random(IMG_LEN) < t
            masked[rng.integers(IMG_LEN)] = True
            ids.append(np.where(masked, MASK, blk))
            pos.append(np.arange(start, start + IMG_LEN))
            grp.append(np.full(IMG_LEN, start))
            noisy.append(np.ones(IMG_LEN, bool))
            img_t.append(np.where(masked, blk, -1))
        rows.append([np.concatenate(a) for a in (ids, pos, grp, noisy, img_t)] + [text_t])
    L = max(len(r[0]) for r in rows)

    def pad(i, fill):
        return torch.as_tensor(np.stack([np.pad(r[i], (0, L - len(r[i])), constant_values=fill) for r in rows]))

    ids, pos, grp, noisy, img_t = pad(0, PAD), pad(1, 0), pad(2, L + 1), pad(3, False), pad(4, -1)
    text_t = torch.as_tensor(np.stack([np.pad(r[5], (0, L - len(r[5])), constant_values=-1) for r in rows]))
    valid = torch.as_tensor(np.stack([np.arange(L) < len(r[0]) for r in rows]))
    return dict(ids=ids, pos=pos, mask=attention_mask(grp, noisy, valid), text_target=text_t, img_target=img_t)


def sot_loss(logits, batch, w_ce: float = 1.0, w_img: float = 1.0) -> torch.Tensor:
    """L = w_ce CE_text + w_img CE_img (the release loss w_ce CE + w_mse MSE, both weights 1, with
    the flow-matching MSE replaced by cross-entropy on masked image tokens). Text logits are
    restricted to the text vocabulary, image logits to the 16 patch codes."""
    tt, it = batch["text_target"], batch["img_target"]
    ce_text = F.cross_entropy(logits[tt >= 0][:, :N_TEXT], tt[tt >= 0]) if (tt >= 0).any() else 0.0
    ce_img = F.cross_entropy(logits[it >= 0][:, IMG0:IMG0 + 16], it[it >= 0] - IMG0)
    return w_ce * ce_text + w_img * ce_img


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


def train_model(records, *, steps: int, batch_size: int = 32, lr: float = 3e-3, d: int = 64,
                n_layer: int = 2, seed: int = 0, warmup: int = 50, device: str = "cpu"):
    """Train a :class:`UnifiedDecoder` on batches of ``records`` drawn with ``default_rng(seed)``:
    AdamW (betas 0.9, 0.95, as the release), linear warm-up then cosine decay to 5% of ``lr``,
    gradient-norm clip 1.0. The model (initialised on the CPU) and its batches live on ``device``.
    Returns the model and the loss per step."""
    model = UnifiedDecoder(d=d, n_layer=n_layer, seed=seed).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    rng = np.random.default_rng(seed)
    losses = []
    for step in range(steps):
        scale = min(1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in opt.param_groups:
            group["lr"] = lr * scale
        batch = make_training_batch([records[i] for i in rng.integers(len(records), size=batch_size)], rng)
        batch = {key: value.to(device) for key, value in batch.items()}
        loss = sot_loss(model(batch["ids"], batch["pos"], batch["mask"]), batch)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return model, losses
