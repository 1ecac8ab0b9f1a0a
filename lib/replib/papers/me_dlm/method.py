"""ME-DLM's method: the sequence format, the canonical minimal edit script and the edit labels
built from it (digest "Edit labels from edit distance", steps 1-7), the two training modes (mask
mode and on-policy edit mode), phase A (the parallel masked-diffusion draft) and phase B (parallel
edit passes). It knows nothing of the toy's prompts and answers: they come in as token sequences.

The token ids and the sequence layout (prompt left-padded to ``MAX_PROMPT`` tokens, ``SEP``, a
response canvas of ``CANVAS`` positions) are defined here, the lowest module, because the method's
functions and the toy (:mod:`.task`) both use them; their sizes are set for the toy (see the
package docstring's conventions).

Contents:

1. Sequence format: :data:`VOCAB`, :data:`SEP`, :data:`MASK`, :data:`DEL`, :data:`EOS`,
   :data:`PAD`, :data:`IGNORE`, :data:`MAX_PROMPT`, :data:`CANVAS`, :data:`RESP_START`,
   :data:`SEQ_LEN`, :func:`encode_prompts`, :func:`clean_canvas`.
2. Edit scripts: :func:`levenshtein`, :func:`edit_script`, :func:`edit_labels`, :func:`apply_edits`.
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
    "MAX_PROMPT",
    "CANVAS",
    "SEQ_LEN",
    "RESP_START",
    "encode_prompts",
    "clean_canvas",
    "levenshtein",
    "edit_script",
    "edit_labels",
    "apply_edits",
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
MAX_PROMPT = 5
CANVAS = 11  # longest answer (10) + EOS
RESP_START = MAX_PROMPT + 1  # position of the first response token; SEP sits at RESP_START - 1
SEQ_LEN = RESP_START + CANVAS  # 17


def encode_prompts(prompts) -> np.ndarray:
    """``[PAD]*(5 - len) + x + [SEP]``, (n, 6) int64: prompts are left-padded so that the response
    always starts at position 6."""
    out = np.full((len(prompts), RESP_START), PAD, dtype=np.int64)
    for i, x in enumerate(prompts):
        out[i, MAX_PROMPT - len(x):MAX_PROMPT] = x
    out[:, MAX_PROMPT] = SEP
    return out


def clean_canvas(answers) -> np.ndarray:
    """answer + EOS + PAD up to the canvas, (n, 11) int64."""
    out = np.full((len(answers), CANVAS), PAD, dtype=np.int64)
    for i, a in enumerate(answers):
        out[i, :len(a)] = a
        out[i, len(a)] = EOS
    return out


# --------------------------------------------------------------------------------------------
# 2. Edit scripts (digest "Edit labels from edit distance", steps 1-7)
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
    """Labels of one edit pass, release rules (digest steps 3-7).

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


def new_model(cfg, seed: int) -> TwoHeadMLM:
    """The shared two-head bidirectional transformer, sized by ``cfg`` (vocab 15, 17 positions)."""
    return TwoHeadMLM(VOCAB, n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head, max_len=SEQ_LEN, seed=seed)

T_MIN = 1e-3


def _draw_t(n: int, rng) -> np.ndarray:
    """One mask ratio t ~ U(0, 1) per training row, floored at ``T_MIN`` (LLaDA's epsilon): each packed
    row of the release draws its own t, and its effective batch (gradient accumulation over 8 GPUs)
    mixes many of them, while one t for our whole batch made training erratic."""
    return np.maximum(rng.random(n), T_MIN)


def _weighted_ce(logits, labels: torch.Tensor, t: np.ndarray) -> tuple[torch.Tensor, float]:
    """Per row: mean cross-entropy over the row's supervised positions (labels != IGNORE), divided by
    the row's t; averaged over the rows with at least one supervised position. Also returns the plain
    (unweighted) mean cross-entropy, for the training curves."""
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE,
                         reduction="none").reshape(labels.shape)
    supervised = (labels != IGNORE).float()
    count = supervised.sum(1)
    rows = count > 0
    if not rows.any():
        return logits.sum() * 0, float("nan")
    row_mean = (ce * supervised).sum(1)[rows] / count[rows]
    weighted = (row_mean / torch.as_tensor(t, dtype=row_mean.dtype)[rows]).mean()
    return weighted, float((ce * supervised).detach().sum() / supervised.sum())


def mask_mode_loss(model, prompts, answers, t: np.ndarray, rng) -> tuple[torch.Tensor, dict]:
    """Mask mode (plain MDLM): each response token (padding included) of row b is masked with
    probability t_b; the token head predicts masked tokens, the insertion head of position p predicts
    token p + 1 when p + 1 is masked; loss per row = (mean CE_cur + mean CE_nxt) / t_b, averaged over
    rows."""
    clean = np.concatenate([encode_prompts(prompts), clean_canvas(answers)], axis=1)
    masked = np.zeros_like(clean, dtype=bool)
    masked[:, RESP_START:] = rng.random((len(clean), CANVAS)) < t[:, None]
    ids = torch.as_tensor(np.where(masked, MASK, clean))
    cur_lab = np.where(masked, clean, IGNORE)
    nxt_lab = np.full_like(clean, IGNORE)
    nxt_lab[:, :-1] = cur_lab[:, 1:]
    cur, nxt = model(ids)
    loss_cur, ce_cur = _weighted_ce(cur, torch.as_tensor(cur_lab), t)
    loss_nxt, ce_nxt = _weighted_ce(nxt, torch.as_tensor(nxt_lab), t)
    return loss_cur + loss_nxt, {"ce_cur": ce_cur, "ce_nxt": ce_nxt}


def _forbid(logits, tokens):
    logits = logits.clone()
    logits[..., list(tokens)] = float("-inf")
    return logits


@torch.no_grad()
def fill_masks_random(model, ids: np.ndarray, P: int, rng) -> tuple[np.ndarray, int]:
    """Fill the ``[MASK]`` positions of ``ids`` (n, 17) with the current model, committing P tokens
    per forward pass at positions chosen uniformly at random among the masked ones, each the argmax
    token with ``<del>`` (and ``[MASK]``) forbidden. Returns the filled ids and the forward passes."""
    ids = ids.copy()
    passes = 0
    while (ids == MASK).any():
        cur, _ = model(torch.as_tensor(ids))
        pred = _forbid(cur, (DEL, MASK)).argmax(-1).numpy()
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


def _pack(prompt_ids: np.ndarray, responses) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt + right-padded responses as (n, 17) ids and the attention mask hiding the padding."""
    n = len(responses)
    ids = np.full((n, SEQ_LEN), PAD, dtype=np.int64)
    att = np.zeros((n, SEQ_LEN), dtype=np.int64)
    ids[:, :RESP_START] = prompt_ids
    att[:, :RESP_START] = 1
    for i, resp in enumerate(responses):
        ids[i, RESP_START:RESP_START + len(resp)] = resp
        att[i, RESP_START:RESP_START + len(resp)] = 1
    return torch.as_tensor(ids), torch.as_tensor(att)


@torch.no_grad()
def _propose(model, prompt_ids, responses, substitution_only=False):
    """One forward pass of phase B step 1: per response, r (token head argmax, ``<del>`` allowed) and
    g (insertion head of the previous position, i.e. rolled by one), both length len(response)."""
    ids, att = _pack(prompt_ids, responses)
    cur, nxt = model(ids, att)
    r_all = _forbid(cur, (MASK,)).argmax(-1).numpy()
    g_all = _forbid(nxt, (MASK,)).argmax(-1).numpy()
    out = []
    for i, resp in enumerate(responses):
        n = len(resp)
        r = [int(v) for v in r_all[i, RESP_START:RESP_START + n]]
        g = [int(v) for v in g_all[i, RESP_START - 1:RESP_START - 1 + n]]
        if substitution_only:
            r = [y if v == DEL else v for v, y in zip(r, resp)]
            g = list(r)
        out.append((r, g))
    return out


def edit_passes(model, prompts, responses, E: int, *, substitution_only: bool = False,
                keep_trace: int = 0) -> dict:
    """Phase B: E edit passes on ``responses`` (lists of token ids, prompt frozen).

    Each pass: one forward pass, r and g from :func:`_propose`, the update :func:`apply_edits`
    (deletions, replacements, insertions in parallel; truncated to the canvas). A response has
    converged at the first pass with r = y and g = y everywhere. Returns ``states`` (list over passes
    0..E of the responses), ``real_steps`` (per response: passes that changed it before convergence,
    E if it never converged), ``forward_passes`` (= E) and ``traces`` for the first ``keep_trace``
    responses (per pass: before, r, g, deleted positions, inserted gaps, after)."""
    prompt_ids = encode_prompts(prompts)
    current = [list(map(int, r)) for r in responses]
    states = [current]
    real = np.full(len(current), E, dtype=np.int64)
    converged = np.zeros(len(current), dtype=bool)
    traces = [[] for _ in range(min(keep_trace, len(current)))]
    for e in range(E):
        proposals = _propose(model, prompt_ids, current, substitution_only)
        new = []
        for i, (resp, (r, g)) in enumerate(zip(current, proposals)):
            if not converged[i] and r == resp and g == resp:
                converged[i], real[i] = True, e
            nxt = apply_edits(resp, r, g)[:CANVAS]
            if not nxt:
                nxt = [EOS]
            new.append(nxt)
            if i < len(traces):
                traces[i].append({"pass": e + 1, "before": resp, "r": r, "g": g,
                                  "deleted": [k for k, v in enumerate(r) if v == DEL],
                                  "replaced": [k for k, v in enumerate(r) if v != DEL and v != resp[k]],
                                  "inserted": [k for k, v in enumerate(r) if v != DEL and g[k] != v],
                                  "after": nxt})
        current = new
        states.append(current)
    return {"states": states, "real_steps": real, "forward_passes": E, "traces": traces}


def edit_mode_batch(model, prompts, answers, t: np.ndarray, k: int, rng) -> list:
    """Edit mode, building the on-policy inputs: mask row b of the clean canvas at rate t_b, fill the masks
    with the current model (no gradient; P ~ U{2, 4, 8, 11} random positions per pass), delete
    ``<pad>`` and force ``<eos>`` last, then run k edit passes with the current model. Returns the
    edited responses (lists, final token included)."""
    prompt_ids = encode_prompts(prompts)
    canvas = clean_canvas(answers)
    masked = rng.random(canvas.shape) < t[:, None]
    ids = np.concatenate([prompt_ids, np.where(masked, MASK, canvas)], axis=1)
    P = int(rng.choice([2, 4, 8, CANVAS]))
    filled, _ = fill_masks_random(model, ids, P, rng)
    responses = [_finish_draft(row[RESP_START:]) for row in filled]
    if k > 0:
        responses = edit_passes(model, prompts, responses, k)["states"][-1]
    return responses


def edit_mode_loss(model, prompts, answers, responses, t: np.ndarray) -> tuple[torch.Tensor, dict]:
    """Edit mode loss: labels from :func:`edit_labels` against the clean answers; the token head is
    trained on every response position, the insertion head on every labelled gap (gap k at the
    hidden state of position k - 1); loss per row = (mean CE_cur + mean CE_nxt) / t_b, averaged."""
    ids, att = _pack(encode_prompts(prompts), responses)
    cur_lab = np.full((len(responses), SEQ_LEN), IGNORE, dtype=np.int64)
    nxt_lab = np.full((len(responses), SEQ_LEN), IGNORE, dtype=np.int64)
    for i, (resp, ans) in enumerate(zip(responses, answers)):
        token, gap = edit_labels(resp[:-1], list(ans))
        n1 = len(resp)
        cur_lab[i, RESP_START:RESP_START + n1] = token
        nxt_lab[i, RESP_START - 1:RESP_START - 1 + n1] = gap
    cur, nxt = model(ids, att)
    loss_cur, ce_cur = _weighted_ce(cur, torch.as_tensor(cur_lab), t)
    loss_nxt, ce_nxt = _weighted_ce(nxt, torch.as_tensor(nxt_lab), t)
    return loss_cur + loss_nxt, {"ce_cur": ce_cur, "ce_nxt": ce_nxt}


def _make_optimiser(model, cfg):
    """AdamW (weight decay 0.01), linear warmup over ``cfg.warmup`` steps, then cosine decay to 0 over
    ``steps1 + steps2`` (the release's schedule; both phase-2 branches continue phase 1's schedule)."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    total = cfg.steps1 + cfg.steps2

    def factor(step):
        return min(1.0, (step + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * min(step, total) / total))

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
    """Phase A: a canvas of 11 ``[MASK]`` filled in S forward passes. Each pass: x^_i = argmax of the
    token head with ``<del>`` (and ``[MASK]``) forbidden; confidence = softmax probability of x^_i
    with ``<pad>`` also forbidden (0 when x^_i is ``<pad>``); commit the n_s still-masked positions
    of largest confidence (n_s from :func:`step_schedule`). Then delete ``<pad>`` and force the last
    token to ``<eos>``. Returns ``canvas`` (n, 11), ``responses`` (lists) and ``forward_passes`` = S."""
    ids = np.concatenate([encode_prompts(prompts), np.full((len(prompts), CANVAS), MASK, dtype=np.int64)], axis=1)
    for n_s in step_schedule(CANVAS, S):
        cur, _ = model(torch.as_tensor(ids))
        logits = _forbid(cur, (DEL, MASK))
        pred = logits.argmax(-1)
        conf = torch.softmax(_forbid(logits, (PAD,)), -1).gather(-1, pred[..., None]).squeeze(-1)
        conf = torch.where(pred == PAD, torch.zeros_like(conf), conf)
        still = torch.as_tensor(ids == MASK)
        conf = torch.where(still, conf, torch.full_like(conf, -1.0))
        top = conf.topk(n_s, dim=1).indices.numpy()
        rows = np.arange(len(ids))[:, None]
        chosen = np.zeros_like(ids, dtype=bool)
        chosen[rows, top] = True
        chosen &= ids == MASK
        ids[chosen] = pred.numpy()[chosen]
    canvas = ids[:, RESP_START:]
    return {"canvas": canvas, "responses": [_finish_draft(row) for row in canvas], "forward_passes": S}
