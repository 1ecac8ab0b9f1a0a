"""ME-DLM's method: the sequence format, the canonical minimal edit script and the edit labels
built from it (the official code's fixed canonicalisation, steps 1-7 below), the two training modes
(mask mode and on-policy edit mode), phase A (the parallel masked-diffusion draft) and phase B
(parallel edit passes). It knows nothing of the toy's prompts and answers: they come in as token
sequences.

Step numbers are our numbering of the official code. Edit labels: 1 the Levenshtein table, 2 the
backtrace with priority KEEP > REPLACE > DELETE > INSERT, 3 the token labels, 4 the first inserted
token of each gap, 5 the equal-neighbour shift, 6 the "no insertion" labels, 7 the roll of gap
labels onto the previous position. Phase A: 1 append the ``[MASK]`` canvas, 2 the per-step budget,
3 commit the most confident positions, 4 delete ``<pad>`` and force ``<eos>``. Phase B: 1 one
forward pass proposes r and g, 2 delete, 3 replace, 4 insert.

The token ids and the sequence layout (prompt left-padded to ``MAX_PROMPT`` tokens, ``SEP``, a
response canvas of ``CANVAS`` positions) are defined here, the lowest module, because the method's
functions and the toy (:mod:`.task`) both use them; their sizes are set for the toy (see the
package docstring's conventions).

Contents:

1. Sequence format: :data:`VOCAB`, :data:`SEP`, :data:`MASK`, :data:`DEL`, :data:`EOS`,
   :data:`PAD`, :data:`IGNORE`, :data:`MIN_PROMPT`, :data:`MAX_PROMPT`, :data:`CANVAS`, :data:`RESP_START`,
   :data:`SEQ_LEN`, :func:`encode_prompts`, :func:`clean_canvas`.
2. Edit scripts: :func:`levenshtein` (and :func:`levenshtein_batch`), :func:`edit_script`, :func:`edit_labels`, :func:`apply_edits`,
   and their batched twins for training, :func:`edit_labels_batch` and :func:`apply_edits_batch`.
3. Model, training modes and phase B: :func:`new_model`, :func:`mask_mode_loss`,
   :func:`fill_masks_random`, :func:`edit_passes`, :func:`edit_mode_batch`, :func:`edit_mode_loss`
   (and the release's optimiser and schedule, ``_make_optimiser``).
4. Phase A: :func:`step_schedule`, :func:`draft`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F

from replib.models.masked_lm import TwoHeadMLM

__all__ = [
    "VOCAB",
    "SEP",
    "MASK",
    "DEL",
    "EOS",
    "PAD",
    "IGNORE",
    "MIN_PROMPT",
    "MAX_PROMPT",
    "CANVAS",
    "SEQ_LEN",
    "RESP_START",
    "encode_prompts",
    "clean_canvas",
    "levenshtein",
    "edit_script",
    "edit_labels",
    "levenshtein_batch",
    "edit_labels_batch",
    "apply_edits",
    "apply_edits_batch",
    "new_model",
    "mask_mode_loss",
    "fill_masks_random",
    "edit_mode_batch",
    "edit_mode_loss",
    "step_schedule",
    "draft",
    "edit_passes",
]


# --------------------------------------------------------------------------------------------
# 1. Sequence format (token ids and layout, shared with the toy)
# --------------------------------------------------------------------------------------------

SEP, MASK, DEL, EOS, PAD = 10, 11, 12, 13, 14
VOCAB = 15
IGNORE = -100
MIN_PROMPT, MAX_PROMPT = 2, 3  # prompt lengths of the toy
CANVAS = 2 * MAX_PROMPT + 1  # longest answer (6, the doubled prompt) + EOS: 7
RESP_START = MAX_PROMPT + 1  # position of the first response token; SEP sits at RESP_START - 1
SEQ_LEN = RESP_START + CANVAS  # 11


def encode_prompts(prompts) -> np.ndarray:
    """``[PAD]*(MAX_PROMPT - len) + x + [SEP]``, (n, RESP_START) int64: prompts are left-padded so
    that the response always starts at position ``RESP_START``."""
    out = np.full((len(prompts), RESP_START), PAD, dtype=np.int64)
    for i, x in enumerate(prompts):
        out[i, MAX_PROMPT - len(x):MAX_PROMPT] = x
    out[:, MAX_PROMPT] = SEP
    return out


def clean_canvas(answers) -> np.ndarray:
    """answer + EOS + PAD up to the canvas, (n, CANVAS) int64."""
    out = np.full((len(answers), CANVAS), PAD, dtype=np.int64)
    for i, a in enumerate(answers):
        out[i, :len(a)] = a
        out[i, len(a)] = EOS
    return out


# --------------------------------------------------------------------------------------------
# 2. Edit scripts (the official code's edit labels, steps 1-7)
# --------------------------------------------------------------------------------------------


def _table(a, b) -> np.ndarray:
    """Step 1: the Levenshtein table D (unit costs), (len(a)+1, len(b)+1)."""
    n, m = len(a), len(b)
    D = np.zeros((n + 1, m + 1), dtype=np.int64)
    D[:, 0] = np.arange(n + 1)
    D[0, :] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            D[i, j] = min(D[i - 1, j - 1] + (a[i - 1] != b[j - 1]), D[i - 1, j] + 1, D[i, j - 1] + 1)
    return D


def levenshtein(a, b) -> int:
    """Edit distance with unit costs for replace, delete and insert."""
    return int(_table(list(a), list(b))[len(a), len(b)])


def edit_script(draft, target) -> list[tuple]:
    """Step 2: the canonical minimal edit script, from the backtrace with priority
    KEEP > REPLACE > DELETE > INSERT. Returns ops in left-to-right order as
    ``("keep"|"replace"|"delete", i, token)`` (draft position i) or ``("insert", gap, token)`` (the gap
    before draft position ``gap``)."""
    a, b = list(draft), list(target)
    D = _table(a, b)
    i, j, ops = len(a), len(b), []
    while i > 0 or j > 0:
        if i > 0 and j > 0 and a[i - 1] == b[j - 1] and D[i, j] == D[i - 1, j - 1]:
            ops.append(("keep", i - 1, a[i - 1]))
            i, j = i - 1, j - 1
        elif i > 0 and j > 0 and D[i, j] == D[i - 1, j - 1] + 1:
            ops.append(("replace", i - 1, b[j - 1]))
            i, j = i - 1, j - 1
        elif i > 0 and D[i, j] == D[i - 1, j] + 1:
            ops.append(("delete", i - 1, None))
            i -= 1
        else:
            ops.append(("insert", i, b[j - 1]))
            j -= 1
    return ops[::-1]


def edit_labels(draft, target, check_gap0: bool = False, *, eos=EOS, delete=DEL, ignore=IGNORE):
    """Labels of one edit pass, release rules (steps 3-7).

    ``draft`` is the draft response *without* its final token (y~_1..n), ``target`` the clean response
    without its ``<eos>`` (y*_1..m). Returns ``(token_labels, gap_labels)``, two lists of length n + 1:

    * ``token_labels[i]`` for draft position i (step 3): KEEP -> the token itself, REPLACE -> the
      target token, DELETE -> ``delete``; position n (the final token) -> ``eos``.
    * ``gap_labels[k]`` for gap k, the slot before draft position k (gap n: before the final token):
      the *first* token to insert there (step 4), after the equal-neighbour shift for k = 1..n-1
      (step 5; also k = 0 with ``check_gap0``); otherwise "no insertion" = the token label of the
      first non-deleted position at or after k (step 6), or ``ignore`` when position k-1 is deleted;
      an unlabelled last gap gets ``eos``. Step 7 (the roll): gap k trains the insertion head of
      position k - 1 (the last prompt token for k = 0).
    """
    draft, target = list(draft), list(target)
    n = len(draft)
    token = [None] * n + [eos]
    inserts = [[] for _ in range(n + 1)]
    for op, pos, tok in edit_script(draft, target):
        if op == "keep":
            token[pos] = draft[pos]
        elif op == "replace":
            token[pos] = tok
        elif op == "delete":
            token[pos] = delete
        else:
            inserts[pos].append(tok)
    gap = [ins[0] if ins else None for ins in inserts]  # step 4: only the first inserted token
    for k in range(0 if check_gap0 else 1, n):  # step 5: inserting X before X is unrepresentable
        if gap[k] is not None and gap[k] == token[k]:
            gap[k], gap[k + 1] = gap[k + 1], gap[k]
    for k in range(n + 1):  # step 6
        if gap[k] is not None:
            continue
        if k >= 1 and token[k - 1] == delete:
            gap[k] = eos if k == n else ignore
            continue
        nxt = next((token[i] for i in range(k, n + 1) if token[i] != delete), eos)
        gap[k] = nxt
    return token, gap


NONE = -1  # "no label yet" inside edit_labels_batch


def _pad_rows(rows, fill) -> tuple[np.ndarray, np.ndarray]:
    """Lists of ints as a right-padded (n, max_len) int64 array and their lengths."""
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    out = np.full((len(rows), max(1, int(lengths.max(initial=0)))), fill, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out, lengths


def _table_batch(a, na, b, nb) -> np.ndarray:
    """Step 1 for a batch: the Levenshtein tables (n, N+1, M+1) of padded rows ``a`` (lengths ``na``)
    and ``b`` (lengths ``nb``). Row i of a table from row i - 1 at once: the diagonal and vertical
    moves first, then the horizontal ones as a running minimum, D[i, j] = min_k (c_k + j - k). Cells
    past a row's lengths are meaningless and never read."""
    n, N = a.shape
    M = b.shape[1]
    cols = np.arange(M + 1)
    D = np.empty((n, N + 1, M + 1), dtype=np.int64)
    D[:, 0] = cols
    for i in range(1, N + 1):
        c = np.empty((n, M + 1), dtype=np.int64)
        c[:, 0] = i
        c[:, 1:] = np.minimum(D[:, i - 1, :-1] + (a[:, i - 1, None] != b), D[:, i - 1, 1:] + 1)
        D[:, i] = np.minimum.accumulate(c - cols, axis=1) + cols
    return D


def levenshtein_batch(a_rows, b_rows) -> np.ndarray:
    """:func:`levenshtein` of each pair (a_rows[i], b_rows[i]) at once (lists of ints), from the
    batched table of step 1; (n,) int64."""
    a, na = _pad_rows(a_rows, -2)
    b, nb = _pad_rows(b_rows, -3)
    return _table_batch(a, na, b, nb)[np.arange(len(a_rows)), na, nb]


def edit_labels_batch(drafts, targets, check_gap0: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """:func:`edit_labels` for a batch of integer sequences, vectorised over the rows (steps 1-7 with
    the same backtrace priority and the same corner cases). Returns ``(token_labels, gap_labels)``,
    two (n, max_len + 1) int64 arrays: row i holds the labels of its len(drafts[i]) + 1 positions,
    then ``IGNORE``."""
    a, na = _pad_rows(drafts, -2)
    b, nb = _pad_rows(targets, -3)
    n, N = len(drafts), a.shape[1]
    D = _table_batch(a, na, b, nb)
    rows = np.arange(n)
    token = np.full((n, N + 2), NONE, dtype=np.int64)
    gap = np.full((n, N + 2), NONE, dtype=np.int64)
    token[rows, na] = EOS
    i, j = na.copy(), nb.copy()
    for _ in range(N + b.shape[1]):  # step 2: one backtrace move per row and iteration
        active = (i > 0) | (j > 0)
        if not active.any():
            break
        d = D[rows, i, j]
        diag = D[rows, np.maximum(i - 1, 0), np.maximum(j - 1, 0)]
        up = D[rows, np.maximum(i - 1, 0), j]
        ai, bj = a[rows, np.maximum(i - 1, 0)], b[rows, np.maximum(j - 1, 0)]
        both = active & (i > 0) & (j > 0)
        keep = both & (ai == bj) & (d == diag)
        replace = both & ~keep & (d == diag + 1)
        delete = active & ~keep & ~replace & (i > 0) & (d == up + 1)
        insert = active & ~keep & ~replace & ~delete
        token[rows[keep], i[keep] - 1] = ai[keep]  # step 3
        token[rows[replace], i[replace] - 1] = bj[replace]
        token[rows[delete], i[delete] - 1] = DEL
        gap[rows[insert], i[insert]] = bj[insert]  # step 4: the leftmost insertion is seen last
        i = i - (keep | replace | delete)
        j = j - (keep | replace | insert)
    for k in range(0 if check_gap0 else 1, N):  # step 5, left to right as in edit_labels
        swap = (k < na) & (gap[:, k] != NONE) & (gap[:, k] == token[:, k])
        gap[swap, k], gap[swap, k + 1] = gap[swap, k + 1], gap[swap, k]
    following = np.full(n, EOS, dtype=np.int64)  # step 6: first non-deleted token label at or after k
    for k in range(N, -1, -1):
        inside = k <= na
        at_end = k == na
        following = np.where(at_end, EOS, np.where(inside & (token[:, k] != DEL), token[:, k], following))
        empty = inside & (gap[:, k] == NONE)
        after_delete = empty & (k >= 1) & (token[:, max(k - 1, 0)] == DEL)
        gap[:, k] = np.where(after_delete, np.where(at_end, EOS, IGNORE), np.where(empty, following, gap[:, k]))
    width = N + 1
    outside = np.arange(width)[None, :] > na[:, None]
    return np.where(outside, IGNORE, token[:, :width]), np.where(outside, IGNORE, gap[:, :width])


def apply_edits(seq, r, g, *, delete=DEL, ignore=IGNORE) -> list:
    """The inference update of one edit pass (phase B steps 2-4) on a response ``seq``: drop every
    position with ``r[i] == delete`` (with its proposal ``g[i]``); every kept position becomes
    ``r[i]``, preceded by ``g[i]`` when ``g[i] != r[i]`` (``g[i]`` is the proposal for the gap before
    position i; ``ignore`` / None means no insertion)."""
    out = []
    for i in range(len(seq)):
        if r[i] == delete:
            continue
        if g[i] is not None and g[i] != ignore and g[i] != r[i]:
            out.append(g[i])
        out.append(r[i])
    return out


# --------------------------------------------------------------------------------------------
# 3. Model, training modes and phase B
# --------------------------------------------------------------------------------------------


class _FastTwoHeadMLM(TwoHeadMLM):
    """:class:`replib.models.masked_lm.TwoHeadMLM` with the same weights and the same function, its
    BERT encoder's forward written out in a few tensor operations (embeddings + LayerNorm; per layer
    fused scaled-dot-product attention with the padding mask, residual + LayerNorm, the GELU
    feed-forward, residual + LayerNorm; then the two heads). It skips the library's per-call mask
    and dispatch machinery, which dominates at this size: 10-25% less CPU per step, outputs equal to
    the library's within float rounding (a test checks it)."""

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        emb = self.encoder.embeddings
        B, T = ids.shape
        h = emb.word_embeddings(ids) + emb.position_embeddings.weight[:T] + emb.token_type_embeddings.weight[0]
        h = emb.LayerNorm(h)
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        for layer in self.encoder.encoder.layer:
            att, sa = layer.attention, layer.attention.self
            nh, hd = sa.num_attention_heads, sa.attention_head_size
            q, k, v = (f(h).view(B, T, nh, hd).transpose(1, 2) for f in (sa.query, sa.key, sa.value))
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(B, T, nh * hd)
            h = att.output.LayerNorm(att.output.dense(ctx) + h)
            h = layer.output.LayerNorm(layer.output.dense(F.gelu(layer.intermediate.dense(h))) + h)
        return self.token_head(h), self.insert_head(h)


def new_model(cfg, seed: int, where="cpu") -> TwoHeadMLM:
    """The shared two-head bidirectional transformer, sized by ``cfg`` (vocab 15, ``SEQ_LEN`` positions),
    built on the CPU (the same initial weights everywhere) and moved to ``where``; its forward is the
    library's, written out (:class:`_FastTwoHeadMLM`)."""
    model = _FastTwoHeadMLM(VOCAB, n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head, max_len=SEQ_LEN,
                            seed=seed)
    return model.to(where)


def _device(model) -> torch.device:
    """The device of ``model``'s parameters (the CPU for a model without any): where the method's
    functions put the id, mask and label tensors they build for it."""
    return next(model.parameters(), torch.empty(0)).device

T_MIN = 1e-3


def _draw_t(n: int, rng) -> np.ndarray:
    """Stratified mask ratios for a batch of n rows (LLaDA): t_b = (1 - eps) u_b + eps with
    u_b = (pi(b) + U(0, 1)) / n for a random permutation pi, so that every batch covers (0, 1)
    evenly; eps = ``T_MIN`` (LLaDA's epsilon)."""
    u = (rng.permutation(n) + rng.random(n)) / n
    return (1 - T_MIN) * u + T_MIN


def _weighted_ce(logits, labels: torch.Tensor, t: np.ndarray | None) -> tuple[torch.Tensor, float]:
    """LLaDA's weighting: per row, the *sum* of the cross-entropies over the row's supervised
    positions (labels != IGNORE) divided by t_b L, with L = ``CANVAS`` the response length (padding
    included, as in LLaDA's SFT loss); averaged over all rows of the batch. ``t=None`` drops the
    1/t_b (edit mode). Also returns the plain (unweighted) mean cross-entropy, for the training
    curves."""
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE,
                         reduction="none").reshape(labels.shape)
    supervised = (labels != IGNORE).float()
    if not supervised.any():
        return logits.sum() * 0, float("nan")
    row_sum = (ce * supervised).sum(1) / CANVAS
    if t is not None:
        row_sum = row_sum / torch.as_tensor(t, dtype=row_sum.dtype, device=row_sum.device)
    return row_sum.mean(), float((ce * supervised).detach().sum() / supervised.sum())


def mask_mode_loss(model, prompts, answers, t: np.ndarray, rng) -> tuple[torch.Tensor, dict]:
    """Mask mode (plain MDLM, LLaDA's objective): each response token (padding included) of row b
    is masked with probability t_b; the token head predicts masked tokens, the insertion head of
    position p predicts token p + 1 when p + 1 is masked; each head's loss is
    mean_b sum_masked CE / (t_b L) (:func:`_weighted_ce`), and the loss is their sum."""
    clean = np.concatenate([encode_prompts(prompts), clean_canvas(answers)], axis=1)
    masked = np.zeros_like(clean, dtype=bool)
    masked[:, RESP_START:] = rng.random((len(clean), CANVAS)) < t[:, None]
    where = _device(model)
    ids = torch.as_tensor(np.where(masked, MASK, clean), device=where)
    cur_lab = np.where(masked, clean, IGNORE)
    nxt_lab = np.full_like(clean, IGNORE)
    nxt_lab[:, :-1] = cur_lab[:, 1:]
    cur, nxt = model(ids)
    loss_cur, ce_cur = _weighted_ce(cur, torch.as_tensor(cur_lab, device=where), t)
    loss_nxt, ce_nxt = _weighted_ce(nxt, torch.as_tensor(nxt_lab, device=where), t)
    return loss_cur + loss_nxt, {"ce_cur": ce_cur, "ce_nxt": ce_nxt}


def _forbid(logits, tokens):
    logits = logits.clone()
    logits[..., list(tokens)] = float("-inf")
    return logits


@torch.no_grad()
def fill_masks_random(model, ids: np.ndarray, P: int, rng) -> tuple[np.ndarray, int]:
    """Fill the ``[MASK]`` positions of ``ids`` (n, ``SEQ_LEN``) with the current model, committing P tokens
    per forward pass at positions chosen uniformly at random among the masked ones, each the argmax
    token with ``<del>`` (and ``[MASK]``) forbidden. Returns the filled ids and the forward passes."""
    ids = ids.copy()
    where = _device(model)
    passes = 0
    while (ids == MASK).any():
        cur, _ = model(torch.as_tensor(ids, device=where))
        pred = _forbid(cur, (DEL, MASK)).argmax(-1).cpu().numpy()
        scores = np.where(ids == MASK, rng.random(ids.shape), -1.0)
        order = np.argsort(-scores, axis=1)[:, :P]
        rows = np.arange(len(ids))[:, None]
        chosen = np.zeros_like(ids, dtype=bool)
        chosen[rows, order] = True
        chosen &= ids == MASK
        ids[chosen] = pred[chosen]
        passes += 1
    return ids, passes


def _finish_draft(canvas_row) -> list[int]:
    """Phase A step 4: delete ``<pad>``, overwrite the last token with ``<eos>``."""
    resp = [int(t) for t in canvas_row if t != PAD]
    if not resp:
        return [EOS]
    resp[-1] = EOS
    return resp


def _pack(prompt_ids: np.ndarray, responses, where="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt + right-padded responses as (n, ``SEQ_LEN``) ids and the attention mask hiding the padding,
    on device ``where``."""
    n = len(responses)
    ids = np.full((n, SEQ_LEN), PAD, dtype=np.int64)
    att = np.zeros((n, SEQ_LEN), dtype=np.int64)
    ids[:, :RESP_START] = prompt_ids
    att[:, :RESP_START] = 1
    for i, resp in enumerate(responses):
        ids[i, RESP_START:RESP_START + len(resp)] = resp
        att[i, RESP_START:RESP_START + len(resp)] = 1
    return torch.as_tensor(ids, device=where), torch.as_tensor(att, device=where)


def apply_edits_batch(seq: np.ndarray, lengths: np.ndarray, r: np.ndarray, g: np.ndarray,
                      cap: int = CANVAS) -> tuple[np.ndarray, np.ndarray]:
    """:func:`apply_edits` for a batch, vectorised: ``seq``, ``r``, ``g`` are (n, T) with row i's
    first ``lengths[i]`` entries in use. The output slots alternate (g_0, r_0, g_1, r_1, ...); a
    kept r_i (r_i != ``DEL``) fills its slot, g_i fills its slot when r_i is kept and g_i != r_i; the
    filled slots are packed to the left in order. Returns the (n, cap) result, right-padded with
    ``PAD``, truncated to ``cap`` tokens, and its lengths."""
    T = seq.shape[1]
    inside = np.arange(T)[None, :] < lengths[:, None]
    keep_r = inside & (r != DEL)
    keep_g = keep_r & (g != r) & (g != IGNORE)
    slots = np.stack([g, r], axis=2).reshape(len(seq), 2 * T)
    keep = np.stack([keep_g, keep_r], axis=2).reshape(len(seq), 2 * T)
    order = np.argsort(~keep, axis=1, kind="stable")
    packed = np.where(np.take_along_axis(keep, order, 1), np.take_along_axis(slots, order, 1), PAD)
    out = np.full((len(seq), cap), PAD, dtype=np.int64)
    width = min(cap, 2 * T)
    out[:, :width] = packed[:, :width]
    return out, np.minimum(keep.sum(1), cap)


def _as_array(responses) -> tuple[np.ndarray, np.ndarray]:
    """Responses (lists) as an (n, ``CANVAS``) array right-padded with ``PAD`` and their lengths."""
    lengths = np.array([len(r) for r in responses], dtype=np.int64)
    out = np.full((len(responses), CANVAS), PAD, dtype=np.int64)
    for i, r in enumerate(responses):
        out[i, :len(r)] = r
    return out, lengths


def _as_lists(seq: np.ndarray, lengths: np.ndarray) -> list[list[int]]:
    """The inverse of :func:`_as_array`."""
    return [[int(v) for v in row[:n]] for row, n in zip(seq, lengths)]


@torch.no_grad()
def _propose(model, prompt_ids, seq, lengths, substitution_only=False):
    """One forward pass of phase B step 1 on the (n, ``CANVAS``) responses: r (token head argmax,
    ``<del>`` allowed) and g (insertion head of the previous position, i.e. rolled by one), both
    (n, ``CANVAS``). Substitution only: a proposed ``<del>`` keeps the token, g = r."""
    ids = np.concatenate([prompt_ids, seq], axis=1)
    att = np.concatenate([np.ones_like(prompt_ids), np.arange(CANVAS)[None, :] < lengths[:, None]], axis=1)
    where = _device(model)
    cur, nxt = model(torch.as_tensor(ids, device=where), torch.as_tensor(att.astype(np.int64), device=where))
    r = _forbid(cur, (MASK,)).argmax(-1).cpu().numpy()[:, RESP_START:]
    g = _forbid(nxt, (MASK,)).argmax(-1).cpu().numpy()[:, RESP_START - 1:-1]
    if substitution_only:
        r = np.where(r == DEL, seq, r)
        g = r
    return r, g


def edit_passes(model, prompts, responses, E: int, *, substitution_only: bool = False,
                keep_trace: int = 0) -> dict:
    """Phase B: E edit passes on ``responses`` (lists of token ids, prompt frozen).

    Each pass: one forward pass, r and g from :func:`_propose`, the update :func:`apply_edits_batch`
    (deletions, replacements, insertions in parallel; truncated to the canvas; an emptied response
    becomes ``[<eos>]``). A response has converged at the first pass with r = y and g = y
    everywhere. Returns ``states`` (list over passes 0..E of the responses, as lists),
    ``real_steps`` (per response: passes that changed it before convergence, E if it never
    converged), ``forward_passes`` (= E) and ``traces`` for the first ``keep_trace`` responses (per
    pass: before, r, g, deleted positions, inserted gaps, after)."""
    prompt_ids = encode_prompts(prompts)
    seq, lengths = _as_array(responses)
    states = [_as_lists(seq, lengths)]
    real = np.full(len(seq), E, dtype=np.int64)
    converged = np.zeros(len(seq), dtype=bool)
    traces = [[] for _ in range(min(keep_trace, len(seq)))]
    for e in range(E):
        r, g = _propose(model, prompt_ids, seq, lengths, substitution_only)
        same = ((r == seq) & (g == seq) | (np.arange(CANVAS)[None, :] >= lengths[:, None])).all(1)
        real[same & ~converged] = e
        converged |= same
        new, new_lengths = apply_edits_batch(seq, lengths, r, g)
        empty = new_lengths == 0
        new[empty, 0], new_lengths[empty] = EOS, 1
        for i, trace in enumerate(traces):
            n = int(lengths[i])
            before, ri, gi = (_as_lists(x[i:i + 1], lengths[i:i + 1])[0] for x in (seq, r, g))
            trace.append({"pass": e + 1, "before": before, "r": ri, "g": gi,
                          "deleted": [k for k in range(n) if ri[k] == DEL],
                          "replaced": [k for k in range(n) if ri[k] != DEL and ri[k] != before[k]],
                          "inserted": [k for k in range(n) if ri[k] != DEL and gi[k] != ri[k]],
                          "after": _as_lists(new[i:i + 1], new_lengths[i:i + 1])[0]})
        seq, lengths = new, new_lengths
        states.append(_as_lists(seq, lengths))
    return {"states": states, "real_steps": real, "forward_passes": E, "traces": traces}


FILL_SIZES = (2, 4, CANVAS)  # the release's P in {2, 4, 8, 16}, cut at our canvas (all at once)


def edit_mode_batch(model, prompts, answers, t: np.ndarray, k: int, rng) -> list:
    """Edit mode, building the on-policy inputs: mask row b of the clean canvas at rate t_b, fill the masks
    with the current model (no gradient; P uniform over :data:`FILL_SIZES` random positions per pass), delete
    ``<pad>`` and force ``<eos>`` last, then run k edit passes with the current model. Returns the
    edited responses (lists, final token included)."""
    prompt_ids = encode_prompts(prompts)
    canvas = clean_canvas(answers)
    masked = rng.random(canvas.shape) < t[:, None]
    ids = np.concatenate([prompt_ids, np.where(masked, MASK, canvas)], axis=1)
    P = int(rng.choice(FILL_SIZES))
    filled, _ = fill_masks_random(model, ids, P, rng)
    responses = [_finish_draft(row[RESP_START:]) for row in filled]
    if k > 0:
        responses = edit_passes(model, prompts, responses, k)["states"][-1]
    return responses


def edit_mode_loss(model, prompts, answers, responses, t: np.ndarray) -> tuple[torch.Tensor, dict]:
    """Edit mode loss: labels from :func:`edit_labels` against the clean references ``answers`` (the
    release's one reference per prompt; the toy passes the valid answer nearest each draft); the token head is
    trained on every response position, the insertion head on every labelled gap (gap k at the
    hidden state of position k - 1); each head's loss is mean_b sum CE / L (:func:`_weighted_ce` without
    the 1/t_b: t_b only set how corrupt the draft is, and every position is supervised)."""
    where = _device(model)
    ids, att = _pack(encode_prompts(prompts), responses, where)
    token, gap = edit_labels_batch([resp[:-1] for resp in responses], [list(a) for a in answers])
    width = token.shape[1]
    cur_lab = np.full((len(responses), SEQ_LEN), IGNORE, dtype=np.int64)
    nxt_lab = np.full((len(responses), SEQ_LEN), IGNORE, dtype=np.int64)
    cur_lab[:, RESP_START:RESP_START + width] = token
    nxt_lab[:, RESP_START - 1:RESP_START - 1 + width] = gap
    cur, nxt = model(ids, att)
    loss_cur, ce_cur = _weighted_ce(cur, torch.as_tensor(cur_lab, device=where), None)
    loss_nxt, ce_nxt = _weighted_ce(nxt, torch.as_tensor(nxt_lab, device=where), None)
    return loss_cur + loss_nxt, {"ce_cur": ce_cur, "ce_nxt": ce_nxt}


def _make_optimiser(model, cfg, steps: int):
    """AdamW (weight decay 0.01), linear warmup over ``cfg.warmup`` steps, then cosine decay to 0 over
    ``steps``: the release's optimiser and schedule, set up afresh for each training stage (phase 1,
    then each phase-2 branch, as the release's stage 3 is a run of its own). The update runs on all
    parameters at once (``foreach``: the same numbers as the per-tensor loop, in less time)."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, foreach=True)

    def factor(step):
        return min(1.0, (step + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    return opt, sched


# --------------------------------------------------------------------------------------------
# 4. Inference, phase A
# --------------------------------------------------------------------------------------------


def step_schedule(L: int, S: int) -> list[int]:
    """Phase A's n_s, the tokens committed per pass: floor(L/S) + 1 for the first L mod S passes,
    then floor(L/S) (S passes in all; the counts sum to L)."""
    q, rem = divmod(L, S)
    return [q + 1 if s < rem else q for s in range(S)]


@torch.no_grad()
def draft(model, prompts, S: int) -> dict:
    """Phase A: a canvas of ``CANVAS`` ``[MASK]`` filled in S forward passes. Each pass: x^_i = argmax of the
    token head with ``<del>`` (and ``[MASK]``) forbidden; confidence = softmax probability of x^_i
    with ``<pad>`` also forbidden (0 when x^_i is ``<pad>``); commit the n_s still-masked positions
    of largest confidence (n_s from :func:`step_schedule`). Then delete ``<pad>`` and force the last
    token to ``<eos>``. Returns ``canvas`` (n, ``CANVAS``), ``responses`` (lists) and ``forward_passes`` = S."""
    ids = np.concatenate([encode_prompts(prompts), np.full((len(prompts), CANVAS), MASK, dtype=np.int64)], axis=1)
    where = _device(model)
    for n_s in step_schedule(CANVAS, S):
        cur, _ = model(torch.as_tensor(ids, device=where))
        logits = _forbid(cur, (DEL, MASK))
        pred = logits.argmax(-1)
        conf = torch.softmax(_forbid(logits, (PAD,)), -1).gather(-1, pred[..., None]).squeeze(-1)
        conf = torch.where(pred == PAD, torch.zeros_like(conf), conf)
        still = torch.as_tensor(ids == MASK, device=where)
        conf = torch.where(still, conf, torch.full_like(conf, -1.0))
        top = conf.topk(n_s, dim=1).indices.cpu().numpy()
        rows = np.arange(len(ids))[:, None]
        chosen = np.zeros_like(ids, dtype=bool)
        chosen[rows, top] = True
        chosen &= ids == MASK
        ids[chosen] = pred.cpu().numpy()[chosen]
    canvas = ids[:, RESP_START:]
    return {"canvas": canvas, "responses": [_finish_draft(row) for row in canvas], "forward_passes": S}
