"""ME-DLM: edit-based refinement for parallel masked diffusion language models, at CPU scale.

Paper: Ren, Zhan, Lu, Wang, Yang, Hou, Pan, Li, "ME-DLM: Edit-Based Refinement for Parallel Masked
Diffusion Language Models" (ICML 2026, arXiv 2605.09603); official code
https://github.com/renhouxing/ME-DLM. Only the abstract and the opening of the introduction could be
read; the method follows the official code as summarised in the digest
``/work/shared/papers/me_dlm.md``. Decoding has two phases:

* phase A, a parallel masked-diffusion draft: a canvas of ``[MASK]`` is filled in S forward passes,
  each committing the n_s most confident still-masked positions; then ``<pad>`` is deleted and the
  last token forced to ``<eos>``;
* phase B, E edit passes: one forward pass proposes, for every position i, a token r_i (token
  head; ``<del>`` deletes) and a token g_i for the gap before it (the insertion head of position
  i - 1); all deletions, replacements and insertions are applied in parallel. "No insertion" is
  encoded as g_i = r_i.

Training labels for phase B come from a canonical minimal edit script (Levenshtein backtrace with
priority KEEP > REPLACE > DELETE > INSERT) between the model's own on-policy draft and the clean
response.

Contents:

1. The toy ("one prompt, three valid answers"): :data:`VOCAB`, :data:`SEP`, :data:`MASK`,
   :data:`DEL`, :data:`EOS`, :data:`PAD`, :data:`CANVAS`, :data:`SEQ_LEN`, :func:`valid_answers`,
   :func:`is_valid`, :func:`nearest_valid_distance`, :func:`draw_prompts`, :func:`encode_prompts`,
   :func:`clean_canvas`, :func:`response_answer`, :func:`detok`.
2. Edit scripts: :func:`levenshtein`, :func:`edit_script`, :func:`edit_labels`, :func:`apply_edits`,
   :func:`oracle_stuck_rate`.
3. Model and training: :func:`new_model`, :func:`mask_mode_loss`, :func:`fill_masks_random`,
   :func:`edit_mode_batch`, :func:`edit_mode_loss`, :func:`train_phase`.
4. Inference: :func:`step_schedule`, :func:`draft`, :func:`edit_passes`.
5. The experiment: :data:`EXPERIMENT_PROFILES`, :func:`evaluate`, :func:`run_seed`,
   :func:`run_experiment`, :func:`claim_values`.
6. Theory helpers: :func:`marginal_vs_joint_example`, :func:`worked_edit_examples`.
7. Exercise graders: :func:`check_levenshtein`, :func:`check_step_schedule`, :func:`check_apply_edits`.

Conventions. Token ids: digits 0-9 are ids 0-9, ``SEP`` = 10, ``MASK`` = 11, ``DEL`` = 12,
``EOS`` = 13, ``PAD`` = 14. A prompt is a digit string x of length 3-5; its valid answers are
reverse(x), sort(x) and x with every digit doubled (length 3-10). A sequence has the fixed length
17: the prompt *left*-padded with ``PAD`` to 5 tokens, ``SEP`` (position 5), then the response
canvas of 11 positions (6..16). The response is the answer + ``EOS`` + ``PAD`` up to the canvas, so
the model learns the length by predicting padding. After the draft deletes ``PAD``, responses have
variable length (at most 11); they are right-padded with ``PAD`` in the tensor and hidden with the
attention mask. The answer a response stands for is its tokens before the first ``EOS``
(:func:`response_answer`); it is valid iff it equals one of the three answers.

Fidelity notes (differences from the release, all deliberate, see also the chapter):

* Scale: a 2-3 layer BERT-style encoder (:class:`replib.models.masked_lm.TwoHeadMLM`) trained from
  scratch on the toy, not LLaDA-8B; canvas 11, not 512; P in {2, 4, 8, 11} (not {2, 4, 8, 16});
  E_max = 4 curriculum edit passes (not 32). Stages 1-2 of the release (pretraining, mask-mode SFT)
  are one phase here ("phase 1", mask mode), stage 3 is "phase 2" (edit mode with probability 0.5).
* Budget: on this 2-core machine a mask-mode step at batch 64 (d = 64, 2 layers, two threads) costs
  ~17 ms and an edit-mode step ~50 ms. The book profile uses d = 64, 2 layers and 700 / 400 steps
  (about 2 minutes for three seeds, 300 test prompts), which does not train the toy well (the
  chapter says so); the paper profile (d = 96, 3 layers, 3000 / 1500 steps) does.
* The MDLM baseline is compute-matched in optimiser steps: it continues from the *same* phase-1
  checkpoint (weights and AdamW state) for ``steps2`` more mask-mode steps, so the two models differ
  only in phase 2.
* AdamW (weight decay 0.01), linear warm-up over ``warmup`` steps, then cosine decay to 0 over
  ``steps1 + steps2``; both phase-2 branches continue phase 1's schedule. Gradients are clipped at
  norm 1 (the HF Trainer default the release runs with).
* One mask ratio t ~ U(0, 1) per row (the release: per packed row), floored at 1e-3; each row's loss
  is (mean CE_cur + mean CE_nxt) / t in both modes, as in the release, and the batch loss is the mean
  over rows. Every response token,
  the first included, can be masked (the release never masks the first response token, which there
  is a chat-template token; here it is the answer's first digit, which the model must learn).
* Edit-mode drafts: one P per batch; the fill forbids ``<del>`` and ``[MASK]``; as at inference,
  ``<pad>`` is deleted and the last token forced to ``<eos>`` before the k = floor(progress * E_max)
  curriculum edit passes. Edited responses are truncated to the canvas (11 tokens): the release caps
  the total length too.
* Inference forbids ``[MASK]`` as a prediction besides the documented ``<del>`` rule (a trained
  model never predicts it; this only removes a degenerate case). Substitution-only editing (the
  ablation) applies the replacements only: a proposed ``<del>`` keeps the token, insertions are
  ignored, so the length never changes.
* The label builder follows the release exactly, corner cases included: the equal-neighbour shift
  is not applied to gap 0, so e.g. "cb" -> "ccb" is never repaired by an oracle pass
  (``check_gap0=True`` is the obvious fix, offered as an option and measured, not used in training).
"""

from __future__ import annotations

import copy
import math
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from replib.core.runtime import compute_threads, seed_everything
from replib.models.masked_lm import TwoHeadMLM

__all__ = [
    "VOCAB", "SEP", "MASK", "DEL", "EOS", "PAD", "IGNORE", "MAX_PROMPT", "CANVAS", "SEQ_LEN", "RESP_START",
    "EXPERIMENT_PROFILES",
    "valid_answers", "is_valid", "nearest_valid_distance", "draw_prompts", "encode_prompts", "clean_canvas",
    "response_answer", "detok",
    "levenshtein", "edit_script", "edit_labels", "apply_edits", "oracle_stuck_rate",
    "new_model", "mask_mode_loss", "fill_masks_random", "edit_mode_batch", "edit_mode_loss", "train_phase",
    "step_schedule", "draft", "edit_passes",
    "evaluate", "run_seed", "run_experiment", "claim_values",
    "marginal_vs_joint_example", "worked_edit_examples",
    "check_levenshtein", "check_step_schedule", "check_apply_edits",
]

# --------------------------------------------------------------------------------------------
# 1. The toy
# --------------------------------------------------------------------------------------------

SEP, MASK, DEL, EOS, PAD = 10, 11, 12, 13, 14
VOCAB = 15
IGNORE = -100
MAX_PROMPT = 5
CANVAS = 11  # longest answer (10) + EOS
RESP_START = MAX_PROMPT + 1  # position of the first response token; SEP sits at RESP_START - 1
SEQ_LEN = RESP_START + CANVAS  # 17
_NAMES = {SEP: "|", MASK: "_", DEL: "<del>", EOS: "<eos>", PAD: "<pad>"}


def valid_answers(prompt) -> list[tuple]:
    """The three valid answers of a digit prompt: reverse, sort, every digit doubled (as tuples;
    duplicates possible when two coincide)."""
    x = tuple(int(d) for d in prompt)
    return [x[::-1], tuple(sorted(x)), tuple(d for d in x for _ in range(2))]


def is_valid(prompt, answer) -> bool:
    """True iff ``answer`` (a digit sequence) equals one of :func:`valid_answers`."""
    return tuple(int(a) for a in answer) in valid_answers(prompt)


def nearest_valid_distance(prompt, answer) -> int:
    """Levenshtein distance from ``answer`` to the nearest valid answer."""
    return min(levenshtein(list(answer), list(v)) for v in valid_answers(prompt))


def draw_prompts(n: int, rng: np.random.Generator) -> list[tuple]:
    """n prompts: length uniform in {3, 4, 5}, digits uniform."""
    lengths = rng.integers(3, MAX_PROMPT + 1, size=n)
    return [tuple(int(d) for d in rng.integers(0, 10, size=k)) for k in lengths]


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


def response_answer(response) -> tuple:
    """The answer a response stands for: its tokens before the first EOS (all if none)."""
    response = [int(t) for t in response]
    return tuple(response[:response.index(EOS)] if EOS in response else response)


def _response_valid(prompt, response) -> bool:
    answer = response_answer(response)
    return all(0 <= t <= 9 for t in answer) and is_valid(prompt, answer)


def _response_distance(prompt, response) -> int:
    return nearest_valid_distance(prompt, response_answer(response))


def detok(tokens) -> list[str]:
    """Readable token strings (digits as themselves, specials as ``|``, ``_``, ``<del>``...)."""
    return [_NAMES.get(int(t), str(int(t))) for t in tokens]


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


def _random_pair(rng, vocab, max_len, max_edits):
    target = list(rng.integers(0, vocab, size=int(rng.integers(1, max_len + 1))))
    draft = list(target)
    for _ in range(int(rng.integers(1, max_edits + 1))):
        op = rng.integers(3)
        if op == 0 and draft:
            draft[rng.integers(len(draft))] = int(rng.integers(vocab))
        elif op == 1 and draft:
            del draft[rng.integers(len(draft))]
        elif len(draft) < max_len:
            draft.insert(int(rng.integers(len(draft) + 1)), int(rng.integers(vocab)))
    return [int(t) for t in draft], [int(t) for t in target]


def oracle_stuck_rate(n_pairs: int = 20000, vocab: int = 5, max_len: int = 12, max_edits: int = 6,
                      check_gap0: bool = False, seed: int = 0) -> float:
    """Share of random (draft, target) pairs at positive distance where one oracle pass (labels of
    :func:`edit_labels` applied with :func:`apply_edits`) does not reduce the edit distance.

    Targets: length uniform in 1..``max_len``, tokens uniform over ``vocab``; drafts: 1..``max_edits``
    random replace/delete/insert operations (length capped at ``max_len``). Pairs at distance 0 are
    skipped. Tokens ``vocab`` and ``vocab + 1`` play ``<eos>`` and ``<del>``."""
    rng = np.random.default_rng(seed)
    eos, dele = vocab, vocab + 1
    stuck = counted = 0
    while counted < n_pairs:
        d, t = _random_pair(rng, vocab, max_len, max_edits)
        before = levenshtein(d, t)
        if before == 0:
            continue
        r, g = edit_labels(d, t, check_gap0, eos=eos, delete=dele)
        after = levenshtein(apply_edits(d + [eos], r, g, delete=dele), t + [eos])
        stuck += after >= before
        counted += 1
    return stuck / n_pairs


# --------------------------------------------------------------------------------------------
# 3. Model and training
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


def _training_batch(batch: int, rng):
    prompts = draw_prompts(batch, rng)
    answers = [valid_answers(x)[rng.integers(3)] for x in prompts]
    return prompts, answers


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


def train_phase(model, opt, sched, cfg, steps: int, edit_prob: float, rng, label: str, progress=None) -> list[dict]:
    """``steps`` AdamW steps on fresh batches of ``cfg.batch`` prompts (one answer drawn uniformly
    per prompt). Each batch is in edit mode with probability ``edit_prob`` (curriculum
    k = floor(progress * E_max) pre-applied edit passes, progress = step / steps), else mask mode.
    Returns one row per step (phase label, mode, t, the two cross-entropies, loss)."""
    rows = []
    it = range(steps)
    for step in (progress(it) if progress else it):
        prompts, answers = _training_batch(cfg.batch, rng)
        t = _draw_t(cfg.batch, rng)
        edit = rng.random() < edit_prob
        if edit:
            k = int(np.floor(step / steps * cfg.e_max))
            model.eval()
            responses = edit_mode_batch(model, prompts, answers, t, k, rng)
            model.train()
            loss, stats = edit_mode_loss(model, prompts, answers, responses, t)
        else:
            model.train()
            loss, stats = mask_mode_loss(model, prompts, answers, t, rng)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # the HF Trainer default the release runs with
        opt.step()
        sched.step()
        rows.append({"phase": label, "step": step, "mode": "edit" if edit else "mask",
                     "loss": float(loss.detach()), **stats})
    model.eval()
    return rows


# --------------------------------------------------------------------------------------------
# 4. Inference, phase A
# --------------------------------------------------------------------------------------------


def step_schedule(L: int, S: int) -> list[int]:
    """Tokens committed per pass: floor(L/S) + 1 for the first L mod S passes, then floor(L/S)
    (S passes in all; the counts sum to L)."""
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


# --------------------------------------------------------------------------------------------
# 5. The experiment
# --------------------------------------------------------------------------------------------

_COMMON = dict(n_head=4, batch=64, lr=2e-3, warmup=50, e_max=4, mdlm_passes=[1, 2, 3, 4, 5, 11],
               draft_passes=[1, 3], edit_counts=[1, 2, 4], n_traces=4)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], n_layer=1, n_embd=32, steps1=30, steps2=16, n_test=32, **_COMMON),
    "book": dict(seeds=[0, 1, 2], n_layer=2, n_embd=64, steps1=700, steps2=400, n_test=300, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], n_layer=3, n_embd=96, steps1=3000, steps2=1500, n_test=400, **_COMMON),
}


def _as_cfg(cfg):
    return SimpleNamespace(**cfg) if isinstance(cfg, dict) else cfg


def evaluate(mdlm, medlm, prompts, cfg, seed: int) -> dict:
    """All evaluation rows of one seed: ``validity`` (model, draft passes, edit passes, mode, total
    forward passes, validity in points, mean distance to the nearest valid answer, mean real edit
    steps), ``samples`` (per prompt and ME-DLM draft: distance before / after each edit count,
    valid before / after, real edit steps), ``traces``."""
    validity, samples, traces = [], [], []

    def score(responses):
        valid = np.array([_response_valid(x, r) for x, r in zip(prompts, responses)])
        dist = np.array([_response_distance(x, r) for x, r in zip(prompts, responses)])
        return valid, dist

    for S in cfg.mdlm_passes:
        valid, dist = score(draft(mdlm, prompts, S)["responses"])
        validity.append({"seed": seed, "model": "mdlm", "draft_passes": S, "edit_passes": 0, "mode": "none",
                         "forward_passes": S, "validity": 100 * valid.mean(), "distance": dist.mean(),
                         "real_steps": np.nan})
    e_max = max(cfg.edit_counts)
    for S in cfg.draft_passes:
        drafted = draft(medlm, prompts, S)["responses"]
        v0, d0 = score(drafted)
        validity.append({"seed": seed, "model": "me_dlm", "draft_passes": S, "edit_passes": 0, "mode": "none",
                         "forward_passes": S, "validity": 100 * v0.mean(), "distance": d0.mean(),
                         "real_steps": np.nan})
        per = {"seed": seed, "draft_passes": S}
        for mode in (["full", "substitution"] if S == 1 else ["full"]):
            out = edit_passes(medlm, prompts, drafted, e_max, substitution_only=(mode == "substitution"),
                              keep_trace=cfg.n_traces if mode == "full" else 0)
            for E in cfg.edit_counts:
                v, d = score(out["states"][E])
                validity.append({"seed": seed, "model": "me_dlm", "draft_passes": S, "edit_passes": E,
                                 "mode": mode, "forward_passes": S + E, "validity": 100 * v.mean(),
                                 "distance": d.mean(), "real_steps": float(np.minimum(out["real_steps"], E).mean()),
                                 "valid_drafts": int(v0.sum()), "broken": int((v0 & ~v).sum())})
                if mode == "full":
                    per[f"valid_{E}"], per[f"distance_{E}"] = v, d
            if mode == "full":
                per["real_steps"] = out["real_steps"]
                for i, tr in enumerate(out["traces"]):
                    traces.append({"seed": seed, "draft_passes": S, "prompt": prompts[i], "draft": drafted[i],
                                   "passes": tr})
        for i in range(len(prompts)):
            row = {"seed": seed, "draft_passes": S, "prompt": "".join(map(str, prompts[i])),
                   "valid_0": bool(v0[i]), "distance_0": int(d0[i]), "real_steps": int(per["real_steps"][i])}
            for E in cfg.edit_counts:
                row[f"valid_{E}"], row[f"distance_{E}"] = bool(per[f"valid_{E}"][i]), int(per[f"distance_{E}"][i])
            samples.append(row)
    return {"validity": validity, "samples": samples, "traces": traces}


def run_seed(cfg, seed: int, progress=None, threads: int = 1) -> dict:
    """One seed: phase 1 (mask mode, ``steps1``), then from that checkpoint (weights and optimiser)
    ME-DLM phase 2 (``steps2``, edit mode with probability 0.5) and the compute-matched MDLM
    (``steps2`` more mask-mode steps); evaluation on ``n_test`` prompts from a separate stream.
    Plain data only: ``validity``, ``samples``, ``traces``, ``train`` rows and ``seconds``."""
    cfg = _as_cfg(cfg)
    with compute_threads(threads):
        seed_everything(seed)
        seconds = {"seed": seed}
        rng = np.random.default_rng([seed, 1])
        model = new_model(cfg, seed)
        opt, sched = _make_optimiser(model, cfg)
        start = time.perf_counter()
        train_rows = train_phase(model, opt, sched, cfg, cfg.steps1, 0.0, rng, "phase1", progress)
        seconds["phase1"] = time.perf_counter() - start

        def branch(edit_prob, label, stream):
            m = copy.deepcopy(model)
            o, s = _make_optimiser(m, cfg)
            o.load_state_dict(opt.state_dict())
            s.load_state_dict(sched.state_dict())
            start = time.perf_counter()
            rows = train_phase(m, o, s, cfg, cfg.steps2, edit_prob, np.random.default_rng([seed, stream]), label,
                               progress)
            seconds[label] = time.perf_counter() - start
            return m, rows

        medlm, rows_me = branch(0.5, "me_dlm", 2)
        mdlm, rows_md = branch(0.0, "mdlm", 3)
        start = time.perf_counter()
        prompts = draw_prompts(cfg.n_test, np.random.default_rng([seed, 12345]))
        ev = evaluate(mdlm, medlm, prompts, cfg, seed)
        seconds["eval"] = time.perf_counter() - start
    train = [{"seed": seed, **r} for r in train_rows + rows_me + rows_md]
    return {**ev, "train": train, "seconds": seconds}


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed; data frames ``validity``, ``samples``, ``train``, ``seconds``
    and the list ``traces``."""
    cfg = _as_cfg(cfg)
    runs = [run_seed(cfg, seed, progress, threads) for seed in cfg.seeds]
    out = {key: pd.DataFrame([r for run in runs for r in run[key]]) for key in ("validity", "samples", "train")}
    out["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    out["traces"] = [t for run in runs for t in run["traces"]]
    return out


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for the claims of ``chapter.yml`` (validity in points, c4 a share)."""
    cfg = _as_cfg(cfg)
    v = results["validity"]
    nan = float("nan")
    values = {}
    for seed in cfg.seeds:
        vs = v[v["seed"] == seed]

        def pick(model, S, E=0, mode="none"):
            row = vs[(vs["model"] == model) & (vs["draft_passes"] == S) & (vs["edit_passes"] == E)
                     & (vs["mode"] == mode)]
            return row.iloc[0] if len(row) else None

        def val(*a):
            row = pick(*a)
            return float(row["validity"]) if row is not None else nan

        broken = [pick("me_dlm", S, 2, "full") for S in (1, 3)]
        broken = [b for b in broken if b is not None]
        n_valid = sum(int(b["valid_drafts"]) for b in broken)
        values[seed] = {
            "c1_parallel_breaks_validity": val("mdlm", 1) - val("mdlm", CANVAS),
            "c2_edits_repair": val("me_dlm", 1, 2, "full") - val("me_dlm", 1),
            "c3a_equal_budget_3": val("me_dlm", 1, 2, "full") - val("mdlm", 3),
            "c3b_equal_budget_5": val("me_dlm", 3, 2, "full") - val("mdlm", 5),
            "c4_minimal_edits": sum(int(b["broken"]) for b in broken) / n_valid if n_valid else nan,
            "c5_full_vs_substitution": val("me_dlm", 1, 2, "full") - val("me_dlm", 1, 2, "substitution"),
        }
    return values


# --------------------------------------------------------------------------------------------
# 6. Theory helpers
# --------------------------------------------------------------------------------------------


def marginal_vs_joint_example() -> dict:
    """The introduction's example: data {"2+2=4", "2+3=5", "3+2=5"} (uniform). Returns the
    per-position marginals (list of {char: prob}), the probability that sampling every position
    independently from its marginal gives one of the three (12/27), the greedy-parallel output
    (argmax of each marginal) and whether it is valid."""
    data = ["2+2=4", "2+3=5", "3+2=5"]
    marg = []
    for i in range(len(data[0])):
        chars = [s[i] for s in data]
        marg.append({c: chars.count(c) / len(data) for c in sorted(set(chars))})
    p_valid = sum(float(np.prod([marg[i][c] for i, c in enumerate(s)])) for s in data)
    greedy = "".join(max(m, key=m.get) for m in marg)
    return {"data": data, "marginals": marg, "p_valid_independent": p_valid, "p_valid_sequential": 1.0,
            "greedy_parallel": greedy, "greedy_valid": greedy in data}


def worked_edit_examples() -> list[dict]:
    """The theory notebook's examples, with string tokens: script, labels, the text after one
    oracle pass and the passes needed to reach the target."""
    out = []
    for a, b in [("2+2=5", "2+2=4"), ("abcd", "abd"), ("abcd", "abxcd"), ("ab", "axyb"), ("cb", "ccb")]:
        seq, passes = list(a), 0
        after_one = None
        while seq != list(b) and passes < 5:
            r, g = edit_labels(seq, list(b), eos="<eos>", delete="<del>")
            seq = apply_edits(seq + ["<eos>"], r, g, delete="<del>")[:-1]
            passes += 1
            after_one = after_one or "".join(seq)
        token, gap = edit_labels(list(a), list(b), eos="<eos>", delete="<del>")
        out.append({"draft": a, "target": b, "distance": levenshtein(a, b), "script": edit_script(a, b),
                    "token_labels": token, "gap_labels": gap, "after_one_pass": after_one if passes else a,
                    "passes_to_target": passes if seq == list(b) else None})
    return out


# --------------------------------------------------------------------------------------------
# 7. Exercise graders
# --------------------------------------------------------------------------------------------


def check_levenshtein(fn) -> None:
    """Grade ``fn(a, b)`` -> the unit-cost edit distance between two sequences."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(5)
    cases = [("", ""), ("abc", ""), ("", "ab"), ("kitten", "sitting"), ("2+2=5", "2+2=4"), ("abcd", "abd"),
             ("ab", "axyb"), ("flaw", "lawn")]
    cases += [(list(rng.integers(0, 3, size=rng.integers(0, 8))), list(rng.integers(0, 3, size=rng.integers(0, 8))))
              for _ in range(6)]
    grade(lambda a, b: int(fn(a, b)), levenshtein, cases, name="levenshtein")


def check_step_schedule(fn) -> None:
    """Grade ``fn(L, S)`` -> list of tokens committed per pass (floor(L/S) + 1 for the first L mod S
    passes, then floor(L/S))."""
    from replib.core.exercises import grade

    cases = [(11, 1), (11, 2), (11, 3), (11, 4), (11, 11), (512, 48), (12, 4), (5, 7)]
    grade(lambda L, S: list(fn(L, S)), step_schedule, cases, name="step_schedule")


def check_apply_edits(fn) -> None:
    """Grade ``fn(seq, r, g)`` -> the response after one edit pass (``DEL`` = 12 deletes; g[i] != r[i]
    inserts g[i] before r[i])."""
    from replib.core.exercises import grade

    cases = [([1, 2, 3, EOS], [1, 2, 4, EOS], [1, 2, 4, EOS]),
             ([1, 2, 3, EOS], [1, DEL, 3, EOS], [1, 2, 3, EOS]),
             ([1, 2, 3, EOS], [1, 2, 3, EOS], [1, 7, 3, EOS]),
             ([5, 5, EOS], [DEL, 6, EOS], [4, 5, 9]),
             ([EOS], [EOS], [3])]
    grade(lambda s, r, g: list(fn(s, r, g)), apply_edits, cases, name="apply_edits")
