"""The HieRD experiment: the teacher, its precomputed distillation targets, the students (contrastive
only, global KD, HieRD and its ablations) under one budget, their metrics and the claim values.

Contents: :data:`EXPERIMENT_PROFILES`, :data:`EXPERIMENT_BOUNDS`, :data:`METHODS`,
:func:`load_data`, :func:`train_embedder` (the training loop every model shares),
:func:`teacher_clusters`, :func:`teacher_targets`, :func:`cluster_quality`, :func:`evaluate`,
:func:`structure_gap`, :func:`detach_gradient_gap`, :func:`run_seed`, :func:`run_experiment`,
:func:`claim_values`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import multiprocessing
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import compute_threads, model_device, seed_everything

from . import task
from .method import (
    LAYER_PAIRS,
    Embedder,
    HieRDWeights,
    _cos_matrix,
    cluster_tokens,
    cross_pi,
    group_members,
    group_weights,
    hierd_loss,
    info_nce,
    map_clusters,
    patch_centres,
    rkd_loss,
)

__all__ = [
    "EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "METHODS", "load_data", "make_embedder", "train_embedder", "teacher_clusters",
    "teacher_targets", "method_weights", "cluster_quality", "evaluate", "structure_gap", "detach_gradient_gap", "run_seed",
    "run_experiment", "claim_values",
]

# The students: contrastive only (B0), + global RKD (B1), full HieRD (H), HieRD without L_cross, and
# HieRD with the public code's detached group vectors.
METHODS = {
    "contrastive": None,
    "global_kd": HieRDWeights(kd=0.0, cross=0.0),
    "hierd": HieRDWeights(),
    "hierd_no_cross": HieRDWeights(cross=0.0),
    "hierd_detached": HieRDWeights(detach_groups=True),
}

# gkd_scale and hierd_scale: selected by the declared tuning protocol (chapter.yml) on pilot seeds 0, 1 from
# the grid 0.2, 1, 5 by mean validation P@1 (global KD 0.589, 0.608, 0.483; HieRD 0.515, 0.783, 0.833).
_COMMON = dict(teacher_patch=6, teacher_d=64, teacher_layers=3, teacher_heads=4, student_patch=12, student_d=32,
               student_layers=2, student_heads=4, tau=0.02, batch=32, teacher_lr=2e-3, student_lr=2e-3,
               projector_lr_scale=5.0,
               weight_decay=0.01, warmup=0.1, grad_clip=1.0, lam_sp=0.1, eps_percentile=10.0, min_samples=3,
               teacher_seed=1000, gkd_scale=1.0, hierd_scale=5.0, probe_share=0.75, workers=2)
_BOOK_METHODS = ["contrastive", "global_kd", "hierd"]  # the two ablations: paper profile (time budget)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], n_train=300, n_test=200, teacher_epochs=1, student_epochs=1,
                  methods=_BOOK_METHODS, **_COMMON),
    "book": dict(seeds=[1000, 1001, 1002, 1003, 1004], n_train=3000, n_test=500, teacher_epochs=25, student_epochs=8,
                 methods=_BOOK_METHODS, **_COMMON),
    "paper": dict(seeds=list(range(1000, 1010)), n_train=20000, n_test=2000, teacher_epochs=25, student_epochs=8,
                  methods=list(METHODS), **_COMMON),
}
EXPERIMENT_BOUNDS = {
    "teacher_patch": {2, 3, 4, 6}, "teacher_d": (8, None), "teacher_layers": (3, None), "teacher_heads": (1, None),
    "student_patch": {2, 3, 4, 6, 8, 12}, "student_d": (4, None), "student_layers": (2, None),
    "student_heads": (1, None), "tau": (1e-4, None), "batch": (4, None), "teacher_lr": (0.0, None), "student_lr": (0.0, None),
    "projector_lr_scale": (0.0, None), "weight_decay": (0.0, None), "warmup": (0.0, 1.0), "grad_clip": (0.0, None),
    "lam_sp": (0.0, None), "eps_percentile": (0.0, 100.0), "min_samples": (1, None), "teacher_seed": (0, None),
    "n_train": (8, None), "n_test": (8, None), "teacher_epochs": (1, None), "student_epochs": (1, None),
    "methods": set(METHODS), "gkd_scale": (0.0, None), "hierd_scale": (0.0, None), "probe_share": (0.0, 1.0), "workers": (1, None),
}


# --------------------------------------------------------------------------------------------
# Data and training
# --------------------------------------------------------------------------------------------

def load_data(cfg) -> dict:
    """The train, test and validation scenes (cached data sets, each drawn from its own seed: 1, 2, 3;
    the validation scenes serve the pilot tuning only) as tensors on the profile's model device
    (:func:`core.model_device`)."""
    out = {}
    for split, n, seed in (("train", cfg.n_train, 1), ("test", cfg.n_test, 2), ("val", cfg.n_test, 3)):
        arrays = task.as_arrays(task.build_scenes(n, seed))
        out[split] = {k: torch.as_tensor(v, device=model_device(cfg.profile)) for k, v in arrays.items()}
    return out


def _schedule(step: int, steps: int, warmup: float) -> float:
    """Linear warm-up over the first ``warmup`` share of steps, then cosine decay (the code's)."""
    w = max(1, int(round(warmup * steps)))
    return (step + 1) / w if step < w else 0.5 * (1 + math.cos(math.pi * (step - w) / max(1, steps - w)))


def train_embedder(model: Embedder, data: dict, epochs: int, lr: float, cfg, seed: int,
                   weights: HieRDWeights | None = None, targets: dict | None = None, probe=None) -> pd.DataFrame:
    """Train ``model`` for ``epochs`` passes over ``data`` (batches of ``cfg.batch`` in a seeded
    order), AdamW at peak learning rate ``lr`` with a cosine schedule after a linear warm-up over the
    ``cfg.warmup`` share of the steps, gradient clipping. The loss is step 1 (InfoNCE of
    queries against their answers, answers shared inside the batch are joint positives); with
    ``weights`` (a student) also ``weights.rkd`` x RKD against the teacher's embeddings and, when
    ``weights.kd`` or ``weights.cross`` is positive, :func:`hierd_loss` on the teacher ``targets``
    (step 8). ``probe`` (optional): a pair (step, callback) calling ``callback(model)`` after that step
    (the convergence probe). Returns the per-step loss terms."""
    projectors = targets["projectors"] if targets is not None else None
    params = [{"params": list(model.parameters()), "lr": lr}]
    if weights is not None and (weights.kd > 0 or weights.cross > 0):
        params.append({"params": list(projectors.parameters()), "lr": lr * cfg.projector_lr_scale})
    optimiser = torch.optim.AdamW(params, weight_decay=cfg.weight_decay, fused=True)
    base_lrs = [g["lr"] for g in optimiser.param_groups]
    n = len(data["answer_id"])
    per_epoch = n // cfg.batch
    steps = epochs * per_epoch
    rng = np.random.default_rng([seed, 7])
    rows = []
    for step in range(steps):
        if step % per_epoch == 0:
            order = rng.permutation(n)
        idx = torch.as_tensor(order[(step % per_epoch) * cfg.batch:(step % per_epoch + 1) * cfg.batch],
                              device=data["answer_id"].device)
        for g, lr in zip(optimiser.param_groups, base_lrs):
            g["lr"] = lr * _schedule(step, steps, cfg.warmup)
        out_q = model(data["images"][idx], data["questions"][idx])
        out_a = model(None, data["answers"][idx])
        ids = data["answer_id"][idx]
        row = {"step": step, "nce": info_nce(out_q["embedding"], out_a["embedding"], cfg.tau, ids[:, None] == ids)}
        loss = row["nce"]
        if weights is not None and weights.rkd > 0:
            e_s = torch.cat([out_q["embedding"], out_a["embedding"]])
            e_t = torch.cat([targets["e_q"][idx], targets["e_a"][idx]])
            row["rkd"] = rkd_loss(e_s, e_t)
            loss = loss + weights.rkd * row["rkd"]
        if weights is not None and (weights.kd > 0 or weights.cross > 0):
            terms = hierd_loss(out_q, out_a, _take(targets["pairs"], idx), projectors, model.n_patches, weights)
            loss = loss + terms["total"]
            row.update(text=terms["text"], vis=terms["vis"], cross=terms["cross"])
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in params for p in g["params"]], cfg.grad_clip)
        optimiser.step()
        if probe is not None and step == probe[0]:
            probe[1](model)
        rows.append({k: v if isinstance(v, int) else v.detach() for k, v in row.items()})
    return pd.DataFrame([{k: v if isinstance(v, int) else v.item() for k, v in r.items()} for r in rows])


def _take(tree, idx):
    """Index every tensor of a nested dict / list of teacher targets by the batch ``idx``."""
    if isinstance(tree, dict):
        return {k: _take(v, idx) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_take(v, idx) for v in tree]
    return tree[idx] if isinstance(tree, torch.Tensor) else tree


def _forward_all(model: Embedder, data: dict, batch: int = 500) -> tuple[dict, dict]:
    """The model's outputs on every query and answer of ``data`` (no gradient), concatenated."""
    outs_q, outs_a = [], []
    with torch.no_grad():
        for start in range(0, len(data["answer_id"]), batch):
            sl = slice(start, start + batch)
            outs_q.append(model(data["images"][sl], data["questions"][sl]))
            outs_a.append(model(None, data["answers"][sl]))

    def cat(outs):
        return {"hidden": [torch.cat([o["hidden"][i] for o in outs]) for i in range(len(outs[0]["hidden"]))],
                "attn": [torch.cat([o["attn"][i] for o in outs]) for i in range(len(outs[0]["attn"]))],
                "embedding": torch.cat([o["embedding"] for o in outs])}

    return cat(outs_q), cat(outs_a)


# --------------------------------------------------------------------------------------------
# The teacher's clusters and distillation targets
# --------------------------------------------------------------------------------------------

def teacher_clusters(hidden: list, cfg) -> dict:
    """Step 3 on every image: fine clusters on the teacher's hidden state of the word-level pair,
    coarse on the first phrase-level pair's (n, N_T) labels each."""
    n_t = (task.IMAGE // cfg.teacher_patch) ** 2
    centres = patch_centres(cfg.teacher_patch)
    out = {}
    for level in ("word", "phrase"):
        t_idx = next(t for t, _, lev in LAYER_PAIRS if lev == level)
        states = hidden[t_idx][:, :n_t].cpu().numpy().astype(np.float64)
        out[level] = cluster_tokens(states, centres, cfg.lam_sp, cfg.eps_percentile, cfg.min_samples)
    return out


def _pad_stack(tensors: list, dim: int, fill=0, shape=None) -> torch.Tensor:
    """Stack ``tensors`` on a new dimension ``dim`` after padding each with ``fill`` at the end of
    every dimension to ``shape`` (default: the largest size of each dimension)."""
    shape = shape or [max(sizes) for sizes in zip(*(t.shape for t in tensors))]
    padded = []
    for t in tensors:
        out = t.new_full(shape, fill)
        out[tuple(slice(0, n) for n in t.shape)] = t
        padded.append(out)
    return torch.stack(padded, dim)


def _text_target(h: torch.Tensor, spans, level: str) -> dict:
    """The teacher's text states h (n, M, d), omega^T and group vectors (step 4) and the groups."""
    members = torch.as_tensor(group_members(spans, h.shape[1], level), device=h.device).expand(h.shape[0], -1)
    omega, g, valid = group_weights(h, members, int(members.max()) + 1)
    return {"h": h, "omega": omega, "g": g, "valid": valid, "members": members}


def make_projectors(cfg, seed: int) -> torch.nn.ModuleList:
    """Step 5's linear projectors d_S -> d_T, one per layer pair, drawn on the CPU from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.nn.ModuleList(torch.nn.Linear(cfg.student_d, cfg.teacher_d) for _ in LAYER_PAIRS)


def teacher_targets(teacher: Embedder, data: dict, cfg, seed: int) -> dict:
    """Everything a student needs from the frozen teacher, computed once (no augmentation, so the
    cache is exact): final embeddings e_q, e_a; the clusters; per layer pair the teacher's text
    states, omega^T and group vectors of question and answer (step 4), cluster vectors, the mapped
    student clusters (step 3), X^T and Pi (step 6; the code looks the attention up with the
    hidden-state index, so pair (0, 0) uses the first layer's map and the last pair has none),
    stacked over the pairs in the layout :func:`hierd_loss` reads; and fresh linear projectors
    (:func:`make_projectors` from ``seed``). On the teacher's device."""
    n_t = teacher.n_patches
    where = next(teacher.parameters()).device
    out_q, out_a = _forward_all(teacher, data)
    clusters = teacher_clusters(out_q["hidden"], cfg)
    texts, vision, crosses = [], [], []
    for t_idx, _, level in LAYER_PAIRS:
        hq, ha = out_q["hidden"][t_idx], out_a["hidden"][t_idx]
        lab = torch.as_tensor(clusters[level], device=where)
        n_k = int(lab.max()) + 1
        _, g_vis, valid_vis = group_weights(hq[:, :n_t], lab, n_k)
        q = _text_target(hq[:, n_t:n_t + task.QUESTION_LEN], task.QUESTION_PHRASES, level)
        a = _text_target(ha[:, :task.ANSWER_LEN], task.ANSWER_PHRASES, level)
        pi = None
        if t_idx < len(out_q["attn"]):
            att = out_q["attn"][t_idx][:, n_t:n_t + task.QUESTION_LEN, :n_t]
            text_onehot = (q["members"][:, :, None] == torch.arange(q["g"].shape[1], device=where)).float()
            vis_onehot = (lab[:, :, None] == torch.arange(n_k, device=where)).float()
            pi = cross_pi(att, text_onehot, vis_onehot)
        x = _cos_matrix(q["g"], g_vis)
        student = torch.as_tensor(map_clusters(clusters[level], cfg.teacher_patch, cfg.student_patch), device=where)
        texts.append((q, a))
        vision.append({"g": g_vis, "valid": valid_vis, "members": student})
        crosses.append((x, torch.zeros_like(x) if pi is None else pi))
    text = {k: _pad_stack([_pad_stack([q[k], a[k]], 1, -1 if k == "members" else 0) for q, a in texts], 2,
                          -1 if k == "members" else 0) for k in texts[0][0]}
    n_groups, n_k = text["g"].shape[-2], max(v["g"].shape[1] for v in vision)
    pairs = {"text": text, "vision": {k: _pad_stack([v[k] for v in vision], 1) for k in vision[0]},
             "x": _pad_stack([x for x, _ in crosses], 1, shape=[len(data["answer_id"]), n_groups, n_k]),
             "pi": _pad_stack([pi for _, pi in crosses], 1, shape=[len(data["answer_id"]), n_groups, n_k]),
             "has_pi": tuple(t < len(out_q["attn"]) for t, _, _ in LAYER_PAIRS), "answer_len": task.ANSWER_LEN}
    return {"e_q": out_q["embedding"], "e_a": out_a["embedding"], "clusters": clusters, "pairs": pairs,
            "projectors": make_projectors(cfg, seed).to(where)}


def adjusted_rand(truth: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The adjusted Rand index of each row of two label arrays (n, N) (every value a label, -1
    included), from the pair confusion counts as scikit-learn computes it (1 on full agreement)."""
    def onehot(x):
        values = np.unique(x)
        return (x[..., None] == values).astype(np.int64)

    n = truth.shape[1]
    table = np.einsum("nia,nib->nab", onehot(truth), onehot(labels))  # contingency per image
    squares = (table ** 2).sum((1, 2))
    rows, cols = table.sum(2), table.sum(1)
    tp = squares - n
    fp = (table * cols[:, None, :]).sum((1, 2)) - squares
    fn = (table * rows[:, :, None]).sum((1, 2)) - squares
    tn = n * n - fp - fn - squares
    with np.errstate(invalid="ignore", divide="ignore"):
        ari = 2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn))
    return np.where((fn == 0) & (fp == 0), 1.0, ari)


def cluster_quality(clusters: dict, masks: torch.Tensor, cfg) -> dict:
    """Adjusted Rand index of each image's teacher clusters (noise as one label) against the
    ground-truth object label of each teacher patch (background as one label), mean over images,
    for the fine and coarse clusters; and the mean number of clusters."""
    truth = task.patch_labels(masks.cpu().numpy(), cfg.teacher_patch)
    out = {}
    for level, labels in clusters.items():
        out[f"ari_{level}"] = float(np.mean(adjusted_rand(truth, labels)))
        out[f"clusters_{level}"] = float(np.mean([len(set(c[c >= 0])) for c in labels]))
    return out


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------

def evaluate(model: Embedder, data: dict) -> dict:
    """Retrieval on ``data``'s queries against the 16 answer phrases: P@1 and in-scene accuracy
    (:func:`task.retrieval_metrics`)."""
    with torch.no_grad():
        cand = model(None, torch.as_tensor(task.answer_phrases(), device=data["answers"].device))["embedding"]
        q, _ = _forward_all(model, {**data, "answers": data["answers"][:1].expand(len(data["answer_id"]), -1)})
        scores = (q["embedding"] @ cand.T).cpu().numpy()
    return task.retrieval_metrics(scores, data["answer_id"].cpu().numpy(), data["object_ids"].cpu().numpy())


def structure_gap(student: Embedder, test_targets: dict) -> float:
    """Structural fidelity: the mean over test queries of the mean squared difference between the
    student's and the teacher's phrase x coarse-cluster similarity matrices X (step 6's X) at the
    last layer pair, over the pairs of non-empty groups."""
    _, s_idx, _ = LAYER_PAIRS[-1]
    text, vision = test_targets["pairs"]["text"], test_targets["pairs"]["vision"]  # the question's, last pair
    members, valid_text = text["members"][:, 0, -1], text["valid"][:, 0, -1]
    with torch.no_grad():
        out_q, _ = _forward_all(student, test_targets["data"])
        h = out_q["hidden"][s_idx]
        n_s = student.n_patches
        _, g_text, _ = group_weights(h[:, n_s:n_s + members.shape[1]], members, text["g"].shape[-2])
        _, g_vis, valid = group_weights(h[:, :n_s], vision["members"][:, -1], vision["g"].shape[-2])
        both = (valid & vision["valid"][:, -1])[:, None, :] & valid_text[:, :, None]
        sq = (_cos_matrix(g_text, g_vis) - test_targets["pairs"]["x"][:, -1]).pow(2) * both
        return (sq.sum((1, 2)) / both.sum((1, 2)).clamp_min(1)).mean().item()


def detach_gradient_gap(student: Embedder, data: dict, targets: dict, n: int = 64) -> float:
    """Fidelity note (a) as a check: the largest absolute difference, over all student and projector
    parameters, between the gradient of HieRD's loss with detached group vectors and that of the
    same loss without L^rel and L_cross, on the first ``n`` training examples. Zero when the
    detached structural terms pass no gradient."""
    idx = torch.arange(n, device=data["answer_id"].device)
    grads = []
    for weights in (HieRDWeights(detach_groups=True), HieRDWeights(relational=False)):
        model, proj = copy.deepcopy(student), copy.deepcopy(targets["projectors"])
        out_q = model(data["images"][idx], data["questions"][idx])
        out_a = model(None, data["answers"][idx])
        loss = hierd_loss(out_q, out_a, _take(targets["pairs"], idx), proj, model.n_patches, weights)["total"]
        params = list(model.parameters()) + list(proj.parameters())
        grads.append(torch.autograd.grad(loss, params, allow_unused=True))
    return max((a - b).abs().max().item() if a is not None and b is not None else
               (a if a is not None else b).abs().max().item() if (a is not None or b is not None) else 0.0
               for a, b in zip(*grads))


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------

def make_embedder(cfg, role: str, seed: int) -> Embedder:
    """The teacher or student embedder of ``cfg`` (``role`` "teacher" or "student") on the task's
    vocabulary, its weights drawn from ``seed`` (on the CPU; the experiment moves it)."""
    size = {k: getattr(cfg, f"{role}_{k}") for k in ("patch", "d", "layers", "heads")}
    return Embedder(size["patch"], size["d"], size["layers"], size["heads"], vocab_size=len(task.VOCAB),
                    eos_id=task.TOKEN["<eos>"], seed=seed)


def _student(cfg, seed: int) -> Embedder:
    return make_embedder(cfg, "student", seed)


def run_teacher(cfg, data: dict) -> dict:
    """Train the teacher (contrastive, ``cfg.teacher_epochs``), evaluate it, precompute its targets on
    the train and test sets and the clusters' quality. One teacher for all seeds, as the paper
    distils one pretrained teacher. On the profile's model device."""
    seed_everything(cfg.teacher_seed)
    start = time.perf_counter()
    teacher = make_embedder(cfg, "teacher", cfg.teacher_seed).to(model_device(cfg.profile))
    curve = train_embedder(teacher, data["train"], cfg.teacher_epochs, cfg.teacher_lr, cfg, cfg.teacher_seed)
    teacher.eval()
    trained = time.perf_counter()
    targets = teacher_targets(teacher, data["train"], cfg, cfg.teacher_seed)
    test_targets = teacher_targets(teacher, data["test"], cfg, cfg.teacher_seed)
    test_targets["data"] = data["test"]
    quality = cluster_quality(test_targets["clusters"], data["test"]["masks"], cfg)
    paper_rule = SimpleNamespace(**{**vars(cfg), "eps_percentile": 3.0})
    hidden = _forward_all(teacher, data["test"])[0]["hidden"]
    paper_clusters = {"word": teacher_clusters(hidden, paper_rule)["word"]}
    quality["ari_word_paper_rule"] = cluster_quality(paper_clusters, data["test"]["masks"], cfg)["ari_word"]
    return {"model": teacher, "curve": curve, "metrics": evaluate(teacher, data["test"]), "targets": targets,
            "test_targets": test_targets, "quality": quality,
            "seconds": {"train": trained - start, "targets": time.perf_counter() - trained}}


def method_weights(cfg, method: str) -> HieRDWeights | None:
    """The loss weights of ``method``: the code's (:data:`METHODS`) with the distillation weights
    (RKD for global KD; lambda_kd, lambda_x and RKD for HieRD and its ablations) times the tuned scale
    ``cfg.gkd_scale`` or ``cfg.hierd_scale`` (the tuning grid's one factor, the same for both arms);
    L^tok's 0.1 inside the structural terms is left alone. None for the contrastive student."""
    weights = METHODS[method]
    if weights is None:
        return None
    scale = cfg.gkd_scale if method == "global_kd" else cfg.hierd_scale
    return dataclasses.replace(weights, kd=weights.kd * scale, cross=weights.cross * scale, rkd=weights.rkd * scale)


def run_seed(cfg, seed: int, data: dict, teacher: dict, progress=None) -> dict:
    """Every student method of ``cfg.methods`` from the same initial weights (drawn from ``seed``),
    the same batch order and the same number of steps; their test and validation metrics, the test
    P@1 after ``cfg.probe_share`` of the steps (the convergence probe), the structural gap and curves,
    and the detached-gradient check on the initial student. The students and their projectors are
    drawn on the CPU and moved to the profile's model device."""
    rows, curves = [], []
    where = model_device(cfg.profile)
    initial = _student(cfg, seed).to(where)
    steps = cfg.student_epochs * (len(data["train"]["answer_id"]) // cfg.batch)
    for method in cfg.methods:
        seed_everything(seed)
        start = time.perf_counter()
        model = copy.deepcopy(initial)
        targets = {**teacher["targets"], "projectors": make_projectors(cfg, seed).to(where)}
        probed = {}
        probe = (max(0, int(round(cfg.probe_share * steps)) - 1), lambda m: probed.update(evaluate(m, data["test"])))
        curve = train_embedder(model, data["train"], cfg.student_epochs, cfg.student_lr, cfg, seed,
                               method_weights(cfg, method), targets, probe=probe)
        model.eval()
        val = evaluate(model, data["val"])
        row = {"seed": seed, "method": method, **evaluate(model, data["test"]), "p_at_1_probe": probed["p_at_1"],
               "val_p_at_1": val["p_at_1"], "structure_gap": structure_gap(model, teacher["test_targets"]),
               "seconds": time.perf_counter() - start}
        rows.append(row)
        curves.append(curve.assign(seed=seed, method=method))
        if progress is not None:
            progress.update(1)
    check = detach_gradient_gap(initial, data["train"], teacher["targets"])
    return {"rows": rows, "curves": curves, "detach_gap": check}


_SHARED: dict = {}  # the run's inputs, inherited by forked workers (never pickled)


def _seed_worker(seed: int) -> dict:
    cfg, data, teacher = _SHARED["args"]
    with compute_threads(1):
        return run_seed(cfg, seed, data, teacher)


def run_experiment(cfg, progress=None) -> dict:
    """The teacher, then every seed's students: in ``cfg.workers`` forked processes, one seed each at a
    time (each single-threaded; a seed's results do not depend on where it runs). Returns ``teacher``
    (metrics, cluster quality, seconds, the model and its curve), ``results`` (one row per seed and
    method), ``curves``, the per-seed ``detach_gap`` and the data."""
    with compute_threads(1):
        data = load_data(cfg)
        teacher = run_teacher(cfg, data)
        workers = min(getattr(cfg, "workers", 1), len(cfg.seeds))
        bar = progress(total=len(cfg.seeds), desc="seeds") if progress else None
        if workers > 1:
            _SHARED["args"] = (cfg, data, teacher)
            try:
                with multiprocessing.get_context("fork").Pool(workers) as pool:
                    runs = []
                    for run in pool.imap(_seed_worker, cfg.seeds):
                        runs.append(run)
                        if bar is not None:
                            bar.update(1)
            finally:
                _SHARED.clear()
        else:
            runs = []
            for seed in cfg.seeds:
                runs.append(run_seed(cfg, seed, data, teacher))
                if bar is not None:
                    bar.update(1)
        if bar is not None:
            bar.close()
    return {"teacher": teacher, "data": data,
            "results": pd.DataFrame([r for run in runs for r in run["rows"]]),
            "curves": pd.concat([c for run in runs for c in run["curves"]], ignore_index=True),
            "detach_gap": {seed: run["detach_gap"] for seed, run in zip(cfg.seeds, runs)}}


def claim_values(results: dict, cfg) -> dict:
    """Per seed, the value of each claim of ``chapter.yml``: P@1 and in-scene differences in
    percentage points, the largest P@1 gain over the last quarter of training (the convergence
    probe), the structural-gap ratio, the teacher's cluster ARIs (one teacher: the same
    for every seed) and the detached-gradient check. A method missing from the run gives NaN."""
    table = results["results"].set_index(["seed", "method"])
    teacher = results["teacher"]
    out = {}
    for seed in sorted(set(table.index.get_level_values("seed"))):
        rows = table.loc[seed]

        def get(method: str, metric: str) -> float:
            return float(rows.loc[method, metric]) if method in rows.index else float("nan")

        hierd_p1, hierd_scene = get("hierd", "p_at_1"), get("hierd", "in_scene")
        out[int(seed)] = {
            "p0_base_model_learns": get("contrastive", "p_at_1"),
            "p1_teacher_has_something": 100 * (teacher["metrics"]["p_at_1"] - get("contrastive", "p_at_1")),
            "p2_clusters_object_level": teacher["quality"]["ari_word"],
            "p3_distillation_has_room": 100 * (get("global_kd", "p_at_1") - get("contrastive", "p_at_1")),
            "p4_students_converged": 100 * max(get(m, "p_at_1") - get(m, "p_at_1_probe")
                                               for m in ("contrastive", "global_kd", "hierd")),
            "p5_hierd_fits_structure": get("hierd", "structure_gap") / get("global_kd", "structure_gap"),
            "h1_beats_contrastive": 100 * (hierd_p1 - get("contrastive", "p_at_1")),
            "h2_beats_global_kd": 100 * (hierd_p1 - get("global_kd", "p_at_1")),
            "m1_relations_vs_global_kd": 100 * (hierd_scene - get("global_kd", "in_scene")),
            "k1_detached_groups_pass_no_gradient": float(results["detach_gap"][seed]),
            "x1_coarse_cluster_ari": teacher["quality"]["ari_phrase"],
            "x2_paper_rule_ari": teacher["quality"]["ari_word_paper_rule"],
        }
    return out
