"""HieRD's pieces, each beside the equation or step of the method it implements. The paper's method
section could not be read; the steps are our numbering of the method as the public training code
(github.com/DanhVinhLe/VLM_Embed, loss ``span_propose_attn``) implements it: 1 InfoNCE, 2 text groups,
3 visual clusters and their transfer to the student grid, 4 within-group weights, 5 intra-modal losses,
6 cross-modal loss, 7 RKD, 8 the total.

* :class:`Embedder`: the single-stream embedder both teacher and student are, ``[image tokens]
  [text tokens][EOS]`` through a causal pre-LN transformer, EOS pooling, L2-normalised (the VLM2Vec-style
  embedder the public code builds on).
* :func:`info_nce` (step 1), :func:`rkd_loss` (step 7).
* Text groups (step 2) come from the task's grammar; :func:`group_members` turns spans into labels.
* Visual groups (step 3): :func:`cluster_distance`, :func:`dbscan`, :func:`cluster_tokens`,
  :func:`map_clusters` (teacher -> student grid).
* :func:`group_weights` (step 4: within-group weights omega and group vectors g).
* :func:`relational_loss`, :func:`token_loss` (step 5), :func:`cross_pi`, :func:`cross_loss` (step 6).
* :data:`LAYER_PAIRS` and :func:`hierd_loss` (step 8, the total), with the ``detach_groups`` flag for
  the public code's behaviour (group vectors built from detached hidden states).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "Embedder", "patch_centres", "info_nce", "rkd_loss", "group_members", "cluster_distance", "dbscan",
    "cluster_tokens", "map_clusters", "group_weights", "relational_loss", "token_loss", "cross_pi", "cross_loss",
    "LAYER_PAIRS", "HieRDWeights", "hierd_loss",
]

IMAGE = 24  # the scenes' side in pixels (the task module takes it from here)
MAX_TEXT = 8  # 7 question tokens + EOS
INIT_SCALE = 0.3  # positions and words start at the scale of the patch embeddings (a toy choice)


# --------------------------------------------------------------------------------------------
# The embedder (teacher and student)
# --------------------------------------------------------------------------------------------

class _Block(nn.Module):
    """Pre-LN causal self-attention + MLP; returns the head-averaged attention map as well."""

    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.n_head)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attn = scores.masked_fill(causal, float("-inf")).softmax(-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x)), attn.mean(1)


class Embedder(nn.Module):
    """A VLM2Vec-style embedder: image patches (``patch`` px, a linear patch embedding and a learned
    position per patch) then text tokens (word embeddings, learned positions) then EOS, through
    ``n_layer`` causal pre-LN blocks; the embedding is the L2-normalised final state of EOS
    (token ``eos_id`` of a ``vocab_size`` vocabulary).

    ``forward(images, text)`` (images (B, 3, 24, 24) or None for text-only inputs, text (B, L) token
    ids without EOS) returns ``hidden`` (the n_layer + 1 hidden states, index 0 = input embeddings,
    the last after the final LayerNorm, as in ``transformers``), ``attn`` (n_layer head-averaged
    attention maps) and ``embedding``."""

    def __init__(self, patch: int, d: int, n_layer: int, n_head: int, vocab_size: int, eos_id: int, seed: int = 0):
        super().__init__()
        self.patch, self.grid, self.eos_id = patch, IMAGE // patch, eos_id
        self.n_patches = self.grid ** 2
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.patch_embed = nn.Linear(3 * patch * patch, d)
            self.image_pos = nn.Parameter(INIT_SCALE * torch.randn(self.n_patches, d))
            self.token_embed = nn.Embedding(vocab_size, d)
            nn.init.normal_(self.token_embed.weight, std=INIT_SCALE)
            self.text_pos = nn.Parameter(INIT_SCALE * torch.randn(MAX_TEXT, d))
            self.blocks = nn.ModuleList(_Block(d, n_head) for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(d)

    def patchify(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, 24, 24) -> (B, grid^2, 3 patch^2), patches in row-major order."""
        b, p, g = images.shape[0], self.patch, self.grid
        return images.reshape(b, 3, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(b, g * g, 3 * p * p)

    def forward(self, images: torch.Tensor | None, text: torch.Tensor) -> dict:
        eos = torch.full((text.shape[0], 1), self.eos_id, dtype=text.dtype, device=text.device)
        text = torch.cat([text, eos], 1)
        x = self.token_embed(text) + self.text_pos[: text.shape[1]]
        if images is not None:
            x = torch.cat([self.patch_embed(self.patchify(images) - 0.5) + self.image_pos, x], 1)
        hidden, attn = [x], []
        for block in self.blocks:
            x, a = block(x)
            hidden.append(x)
            attn.append(a)
        hidden[-1] = self.ln_f(x)
        return {"hidden": hidden, "attn": attn, "embedding": F.normalize(hidden[-1][:, -1], dim=-1)}


def patch_centres(patch: int) -> np.ndarray:
    """Pixel centres (x, y) of the patches of a ``patch``-px grid on the 24 px image, row-major."""
    g = IMAGE // patch
    rows, cols = np.divmod(np.arange(g * g), g)
    return np.stack([(cols + 0.5) * patch, (rows + 0.5) * patch], 1)


# --------------------------------------------------------------------------------------------
# Global losses
# --------------------------------------------------------------------------------------------

def info_nce(queries: torch.Tensor, targets: torch.Tensor, tau: float, positive: torch.Tensor | None = None):
    """Eq. 1, in-batch InfoNCE of normalised query and target embeddings (B, d) at temperature tau.
    ``positive`` (B, B) marks the targets that count as positives of each query (the diagonal when
    None); a query with several positives gets a uniform soft target over them (a toy choice: the 16
    answers repeat inside a batch)."""
    logits = queries @ targets.T / tau
    if positive is None:
        return F.cross_entropy(logits, torch.arange(len(queries), device=logits.device))
    soft = positive.float() / positive.float().sum(1, keepdim=True)
    return -(soft * logits.log_softmax(1)).sum(1).mean()


def rkd_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Step 7, relational KD on the batch's final embeddings (n, d_S) and (n, d_T): the distance term
    (squared distances of distinct pairs, each model's divided by its mean, Huber with delta 1) and
    the angle term (cosine of the angle at j of every distinct triplet (i, j, k), Huber), averaged:
    (L_D + L_A) / 2."""
    n = len(student)
    pairs = 1.0 - torch.eye(n, device=student.device)  # masks as weights: boolean indexing is slow on the CPU
    distinct = pairs[:, :, None] * pairs[:, None, :] * pairs[None, :, :]

    def distances(e):
        d = torch.cdist(e, e).pow(2) * pairs
        return d / (d.sum() / pairs.sum())

    def angles(e):
        diff = F.normalize(e[None, :, :] - e[:, None, :], dim=-1)  # diff[j, i] = (e_i - e_j) / |.|
        return diff @ diff.transpose(1, 2)  # [j, i, k]

    with torch.no_grad():
        dt, at = distances(teacher), angles(teacher)
    loss_d = (F.smooth_l1_loss(distances(student), dt, reduction="none") * pairs).sum() / pairs.sum()
    loss_a = (F.smooth_l1_loss(angles(student), at, reduction="none") * distinct).sum() / distinct.sum()
    return 0.5 * (loss_d + loss_a)


# --------------------------------------------------------------------------------------------
# Groups: text spans (step 2) and visual clusters (step 3)
# --------------------------------------------------------------------------------------------

def group_members(spans, length: int, level: str) -> np.ndarray:
    """Step 2, token -> group labels (length,) from the grammar's phrase spans [start, end):
    ``phrase`` = one group per span, ``word`` = one group per token inside a span (our tokens are
    words); -1 for tokens in no span."""
    labels = np.full(length, -1)
    group = 0
    for start, end in spans:
        for t in range(start, end):
            labels[t] = group
            group += level == "word"
        group += level == "phrase"
    return labels


def cluster_distance(states: np.ndarray, centres: np.ndarray, lam_sp: float) -> np.ndarray:
    """Step 3's distance between vision tokens (N, d) with pixel centres (N, 2):
    D_ij = (1 - cos(v_i, v_j)) + lam_sp |c_i - c_j| / sqrt(W^2 + H^2), symmetrised, clamped at 0,
    zero diagonal. ``states`` may carry leading image dimensions, (..., N, d) -> (..., N, N)."""
    v = states / np.maximum(np.linalg.norm(states, axis=-1, keepdims=True), 1e-12)
    space = np.linalg.norm(centres[:, None] - centres[None], axis=-1) / math.hypot(IMAGE, IMAGE)
    d = (1.0 - v @ np.swapaxes(v, -1, -2)) + lam_sp * space
    d = np.maximum(0.5 * (d + np.swapaxes(d, -1, -2)), 0.0)
    return np.where(np.eye(d.shape[-1], dtype=bool), 0.0, d)


def dbscan(distance: np.ndarray, eps, min_samples: int) -> np.ndarray:
    """DBSCAN on a precomputed distance matrix (the clustering of step 3): a point with at least
    ``min_samples`` points (itself included) within ``eps`` is a core point; core points within eps
    of each other share a cluster; a non-core point within eps of a core point joins the cluster of
    its nearest core neighbour; the rest are noise (-1). Clusters are numbered by their first token.
    When every point is noise, all form one cluster (the code's rule). Works on one (N, N) matrix or
    a stack (..., N, N) with one eps per matrix (all images at once)."""
    distance = np.asarray(distance)
    n = distance.shape[-1]
    near = distance <= np.asarray(eps)[..., None, None]
    core = near.sum(-1) >= min_samples
    # clusters of core points: the transitive closure of their eps-links (repeated squaring)
    reach = near & core[..., :, None] & core[..., None, :]
    for _ in range(max(1, math.ceil(math.log2(n)))):
        reach = reach | ((reach.astype(np.float32) @ reach.astype(np.float32)) > 0)
    root = np.where(core, reach.argmax(-1), -1)  # a core point's cluster: its first member
    # border points: the cluster of the nearest core neighbour within eps (first one on ties)
    linked = near & core[..., None, :]
    nearest = np.where(linked, distance, np.inf).argmin(-1)
    border = np.take_along_axis(root, nearest, -1)
    root = np.where(core, root, np.where(linked.any(-1), border, -1))
    # number clusters by their first token; no core point at all: one cluster
    same = (root[..., :, None] == root[..., None, :]) & (root >= 0)[..., :, None]
    first = same.argmax(-1)  # each token's first fellow member
    is_first = (first == np.arange(n)) & (root >= 0)
    rank = np.cumsum(is_first, -1) - 1
    labels = np.where(root >= 0, np.take_along_axis(rank, first, -1), -1)
    return np.where(core.any(-1, keepdims=True), labels, 0)


def cluster_tokens(states: np.ndarray, centres: np.ndarray, lam_sp: float, eps_percentile: float,
                   min_samples: int) -> np.ndarray:
    """Step 3 for one image (states (N, d)) or a stack of them ((n, N, d)): :func:`cluster_distance`,
    eps = the ``eps_percentile``-th percentile of each image's off-diagonal distances (the code:
    3rd), then :func:`dbscan`. Returns labels (N,) or (n, N)."""
    d = cluster_distance(states, centres, lam_sp)
    eps = np.percentile(d[..., ~np.eye(d.shape[-1], dtype=bool)], eps_percentile, axis=-1)
    return dbscan(d, eps, min_samples)


def map_clusters(teacher_labels: np.ndarray, teacher_patch: int, student_patch: int) -> np.ndarray:
    """Step 3's teacher -> student transfer: each clustered teacher patch's centre is scaled to the
    student's image (both 24 px here, scale 1) and lands in student patch (floor(x / P_S),
    floor(y / P_S)) (clamped); that student token joins the cluster. A student token hit by patches
    of several clusters takes the most frequent (ties: the lower label; not stated in the code's
    description, our choice); one hit by none is -1. Works on (N_T,) or batched (n, N_T) labels."""
    labels = np.atleast_2d(teacher_labels)
    g_s = IMAGE // student_patch
    xy = np.clip(np.floor(patch_centres(teacher_patch) / student_patch).astype(int), 0, g_s - 1)
    target = xy[:, 1] * g_s + xy[:, 0]
    n_clusters = max(int(labels.max()) + 1, 1)
    votes = np.zeros((len(labels), g_s * g_s, n_clusters), dtype=int)
    rows, cols = np.nonzero(labels >= 0)
    np.add.at(votes, (rows, target[cols], labels[rows, cols]), 1)
    out = np.where(votes.sum(-1) > 0, votes.argmax(-1), -1)
    return out[0] if np.ndim(teacher_labels) == 1 else out


# --------------------------------------------------------------------------------------------
# Step 4: within-group weights and group vectors
# --------------------------------------------------------------------------------------------

def group_weights(h: torch.Tensor, members: torch.Tensor, n_groups: int, detach: bool = False):
    """Step 4 for a batch: h (B, N, d) token states, members (B, N) group labels (-1: in no group);
    any leading dimensions beyond the batch (layer pairs, kinds of text) are carried along.
    On detached states, z_i = h_i / (std(h_i) + 1e-6), s_ij = z_i.z_j / sqrt(d), a_ij = softmax_j
    s_ij over the j != i of i's group, omega_j = sum_i a_ij (attention received), 1 in singleton
    groups, renormalised to sum 1 in each group. Returns omega (B, N) (0 outside groups), the group
    vectors g_G = sum_{i in G} omega_i h_i (B, n_groups, d) (from detached h when ``detach``, the
    public code's behaviour) and which groups are non-empty (B, n_groups)."""
    hd = h.detach()
    centred = hd - hd.mean(-1, keepdim=True)
    std = (centred.pow(2).sum(-1, keepdim=True) / (h.shape[-1] - 1)).sqrt()  # torch.std, many times faster here
    z = hd / (std + 1e-6)
    s = z @ z.transpose(-1, -2) / math.sqrt(h.shape[-1])
    inside = members >= 0
    same = (members[..., :, None] == members[..., None, :]) & inside[..., :, None]
    same &= ~torch.eye(h.shape[-2], dtype=torch.bool, device=h.device)
    a = torch.nan_to_num(s.masked_fill(~same, float("-inf")).softmax(-1))
    omega = a.sum(-2)
    onehot = (members[..., None] == torch.arange(n_groups, device=h.device)).to(h.dtype)  # (B, N, G)
    size = onehot.sum(-2)  # (B, G)
    group = members.clamp_min(0)  # tokens in no group are masked below
    singleton = torch.gather(size, -1, group) == 1
    omega = torch.where(singleton, torch.ones_like(omega), omega) * inside
    total = torch.gather((onehot.transpose(-1, -2) @ omega[..., None]).squeeze(-1), -1, group)
    omega = torch.where(inside, omega / total.clamp_min(1e-12), torch.zeros_like(omega))
    g = (onehot * omega[..., None]).transpose(-1, -2) @ (hd if detach else h)
    return omega, g, size > 0


# --------------------------------------------------------------------------------------------
# Steps 5 and 6: intra-modal and cross-modal losses
# --------------------------------------------------------------------------------------------

def _cos_matrix(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1, eps=1e-8) @ F.normalize(y, dim=-1, eps=1e-8).transpose(-1, -2)


def relational_loss(g_student: torch.Tensor, g_teacher: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Step 5's L^rel: mean over pairs a != b of valid groups of (cos(g^S_a, g^S_b) - cos(g^T_a,
    g^T_b))^2 (uniform pair weights, as Omega_a = 1), per sample, then the mean over the samples
    (the first dimension) with at least one pair (0 when none has); one value per entry of any
    further leading dimensions (layer pairs)."""
    eye = torch.eye(valid.shape[-1], dtype=torch.bool, device=valid.device)
    pair = (valid[..., :, None] & valid[..., None, :] & ~eye).to(g_student.dtype)
    sq = (_cos_matrix(g_student, g_student) - _cos_matrix(g_teacher, g_teacher)).pow(2) * pair
    n = pair.sum((-2, -1))
    return _mean_where(sq.sum((-2, -1)) / n.clamp_min(1), n > 0)


def _mean_where(per_sample: torch.Tensor, has: torch.Tensor) -> torch.Tensor:
    """The mean of ``per_sample`` over the samples (first dimension) where ``has`` (0 when none)."""
    has = has.to(per_sample.dtype)
    return (per_sample * has).sum(0) / has.sum(0).clamp_min(1)


def token_loss(projected: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Step 5's L^tok: sum_i w_i (1 - cos(P h^S_i, target_i)) / sum_i w_i per sample (text: target
    h^T_i, weights omega^T; vision: target g^T of the token's cluster, weights omega^S), mean over
    samples (first dimension) with positive weight."""
    per = (weights * (1.0 - F.cosine_similarity(projected, targets, dim=-1, eps=1e-8))).sum(-1)
    total = weights.sum(-1)
    return _mean_where(per / total.clamp_min(1e-12), total > 0)


def cross_pi(attention: torch.Tensor, text_onehot: torch.Tensor, vision_onehot: torch.Tensor) -> torch.Tensor:
    """Step 6's pair weights: Pi = B^T A C, normalised to sum 1 per sample, from the teacher's
    head-averaged attention A (B, M, N) of text rows on vision columns and the memberships
    B (B, M, G), C (B, N, K). Zero where a sample's Pi sums to 0."""
    pi = text_onehot.transpose(-1, -2) @ attention @ vision_onehot
    return pi / pi.sum((-2, -1), keepdim=True).clamp_min(1e-12)


def cross_loss(pi: torch.Tensor, x_student: torch.Tensor, x_teacher: torch.Tensor) -> torch.Tensor:
    """Step 6: L_cross = sum_{a,k} Pi_ak (X^S_ak - X^T_ak)^2, X = cos(g^text_a, g^vis_k) of each
    model, mean over samples (the first dimension)."""
    return (pi * (x_student - x_teacher).pow(2)).sum((-2, -1)).mean(0)


# --------------------------------------------------------------------------------------------
# Step 8: the total
# --------------------------------------------------------------------------------------------

# (teacher hidden-state index, student hidden-state index, granularity): our choice for a 3-layer
# teacher and 2-layer student, the code's split scaled down: pair 1 word level, pairs 2-3 phrase level.
LAYER_PAIRS = ((0, 0, "word"), (2, 1, "phrase"), (3, 2, "phrase"))


@dataclass
class HieRDWeights:
    """Step 8's weights (the code's: lambda_kd = lambda_x = 2.5, RKD at lambda_kd / 10, L^tok at 0.1).
    ``relational=False`` drops L^rel and L_cross (the token-level-only variant of the detached-gradient check)."""

    kd: float = 2.5
    cross: float = 2.5
    rkd: float = 0.25
    tok: float = 0.1
    relational: bool = True
    detach_groups: bool = False


def _project(projectors: nn.ModuleList, h: torch.Tensor) -> torch.Tensor:
    """Step 5's projectors P_l applied at once: h (..., P, N, d_S), layer pair p through projector
    p -> (..., P, N, d_T)."""
    weight = torch.stack([p.weight for p in projectors])  # (P, d_T, d_S)
    bias = torch.stack([p.bias for p in projectors])[:, None]  # (P, 1, d_T)
    x = h.movedim(-3, 0)  # one matrix product per pair (a broadcast product is many times slower)
    out = x.reshape(len(projectors), -1, x.shape[-1]) @ weight.transpose(-1, -2) + bias
    return out.reshape(*x.shape[:-1], weight.shape[1]).movedim(0, -3)


def hierd_loss(out_q: dict, out_a: dict, teacher: dict, projectors: nn.ModuleList, n_patches: int,
               weights: HieRDWeights) -> dict:
    """Step 8's structural part for a batch, L_kd = lambda_kd (L_text + L_vis) / 2 + lambda_x L_cross,
    from the student's outputs on queries (``out_q``) and answers (``out_a``) and the teacher's
    precomputed targets (``teacher``: for every layer pair, stacked on dimension 1 and padded to a
    common number of groups, ``text``: the teacher's text states, omega^T, group vectors and
    memberships of the question and the answer (two kinds of text on dimension 1, the answer padded
    to the question's length); ``vision``: the cluster vectors and the student tokens' mapped
    clusters; ``x`` = X^T and ``pi`` = Pi of the question; ``has_pi``: which pairs have an attention
    map, as the code finds none for the last; ``answer_len``). Per layer pair: L_text is the mean
    of the question's and the answer's L^rel + 0.1 L^tok (step 5), L_vis the clusters' (step 5),
    L_cross step 6; each term is then the mean over the layer pairs (L_cross over those with Pi).
    All layer pairs and both texts go through one batched pass. The contrastive and RKD terms are
    added by the caller. Returns the total and each term."""
    s_idx = [s for _, s, _ in LAYER_PAIRS]
    hq = torch.stack([out_q["hidden"][i] for i in s_idx], 1)  # (B, P, L_q, d_S)
    ha = torch.stack([out_a["hidden"][i] for i in s_idx], 1)
    text, vis = teacher["text"], teacher["vision"]
    m = text["h"].shape[-2]
    answer = ha[:, :, :teacher["answer_len"]]
    h_text = torch.stack([hq[:, :, n_patches:n_patches + m], F.pad(answer, (0, 0, 0, m - answer.shape[2]))], 1)
    _, g_text, valid_text = group_weights(h_text, text["members"], text["g"].shape[-2], weights.detach_groups)
    l_text = weights.tok * token_loss(_project(projectors, h_text), text["h"], text["omega"])  # (2, P)
    h_vis, members = hq[:, :, :n_patches], vis["members"]
    n_k, d_t = vis["g"].shape[-2:]
    omega_s, g_vis, valid_s = group_weights(h_vis, members, n_k, weights.detach_groups)
    cluster_target = torch.gather(vis["g"], 2, members.clamp_min(0)[..., None].expand(-1, -1, -1, d_t))
    l_vis = weights.tok * token_loss(_project(projectors, h_vis), cluster_target, omega_s)  # (P,)
    l_cross = torch.zeros((), dtype=hq.dtype, device=hq.device)
    if weights.relational:
        l_text = l_text + relational_loss(g_text, text["g"], valid_text & text["valid"])
        l_vis = l_vis + relational_loss(g_vis, vis["g"], valid_s & vis["valid"])
        pi = teacher["pi"] * valid_s[..., None, :]
        pi = pi / pi.sum((-2, -1), keepdim=True).clamp_min(1e-12)
        cross = cross_loss(pi, _cos_matrix(g_text[:, 0], g_vis), teacher["x"])  # (P,)
        has_pi = torch.tensor(teacher["has_pi"], dtype=cross.dtype, device=cross.device)
        l_cross = (cross * has_pi).sum() / has_pi.sum().clamp_min(1)
    l_text, l_vis = l_text.mean(0).mean(), l_vis.mean()
    total = weights.kd * 0.5 * (l_text + l_vis) + weights.cross * l_cross
    return {"total": total, "text": l_text.detach(), "vis": l_vis.detach(), "cross": l_cross.detach()}
