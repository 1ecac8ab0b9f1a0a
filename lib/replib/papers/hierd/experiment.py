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
import math
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import adjusted_rand_score

from replib.core.runtime import compute_threads, seed_everything

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
    "teacher_targets", "cluster_quality", "evaluate", "structure_gap", "detach_gradient_gap", "run_seed",
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

_COMMON = dict(teacher_patch=6, teacher_d=64, teacher_layers=3, teacher_heads=4, student_patch=8, student_d=32,
               student_layers=2, student_heads=4, tau=0.02, batch=32, teacher_lr=1e-3, student_lr=3e-3,
               projector_lr_scale=5.0,
               weight_decay=0.01, warmup=0.03, grad_clip=1.0, lam_sp=0.1, eps_percentile=10.0, min_samples=3,
               teacher_seed=1000)
_BOOK_METHODS = ["contrastive", "global_kd", "hierd"]  # the two ablations: paper profile (time budget)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], n_train=300, n_test=200, teacher_epochs=1, student_epochs=1,
                  methods=_BOOK_METHODS, **_COMMON),
    "book": dict(seeds=[0, 1, 2], n_train=3000, n_test=500, teacher_epochs=6, student_epochs=4,
                 methods=_BOOK_METHODS, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], n_train=20000, n_test=2000, teacher_epochs=10, student_epochs=6,
                  methods=list(METHODS), **_COMMON),
}
EXPERIMENT_BOUNDS = {
    "teacher_patch": {2, 3, 4, 6}, "teacher_d": (8, None), "teacher_layers": (3, None), "teacher_heads": (1, None),
    "student_patch": {2, 3, 4, 6, 8, 12}, "student_d": (4, None), "student_layers": (2, None),
    "student_heads": (1, None), "tau": (1e-4, None), "batch": (4, None), "teacher_lr": (0.0, None), "student_lr": (0.0, None),
    "projector_lr_scale": (0.0, None), "weight_decay": (0.0, None), "warmup": (0.0, 1.0), "grad_clip": (0.0, None),
    "lam_sp": (0.0, None), "eps_percentile": (0.0, 100.0), "min_samples": (1, None), "teacher_seed": (0, None),
    "n_train": (8, None), "n_test": (8, None), "teacher_epochs": (1, None), "student_epochs": (1, None),
    "methods": set(METHODS),
}


# --------------------------------------------------------------------------------------------
# Data and training
# --------------------------------------------------------------------------------------------

def load_data(cfg) -> dict:
    """The train and test scenes (cached data sets, test drawn from another seed) as tensors."""
    out = {}
    for split, n, seed in (("train", cfg.n_train, 1), ("test", cfg.n_test, 2)):
        arrays = task.as_arrays(task.build_scenes(n, seed))
        out[split] = {k: torch.from_numpy(v) for k, v in arrays.items()}
    return out


def _schedule(step: int, steps: int, warmup: float) -> float:
    """Linear warm-up over the first ``warmup`` share of steps, then cosine decay (the code's)."""
    w = max(1, int(round(warmup * steps)))
    return (step + 1) / w if step < w else 0.5 * (1 + math.cos(math.pi * (step - w) / max(1, steps - w)))


def train_embedder(model: Embedder, data: dict, epochs: int, lr: float, cfg, seed: int,
                   weights: HieRDWeights | None = None, targets: dict | None = None) -> pd.DataFrame:
    """Train ``model`` for ``epochs`` passes over ``data`` (batches of ``cfg.batch`` in a seeded
    order), AdamW at peak learning rate ``lr`` with a warm-up cosine schedule, gradient clipping. The loss is eq. 1 (InfoNCE of
    queries against their answers, answers shared inside the batch are joint positives); with
    ``weights`` (a student) also ``weights.rkd`` x RKD against the teacher's embeddings and, when
    ``weights.kd`` or ``weights.cross`` is positive, :func:`hierd_loss` on the teacher ``targets``
    (step 8). Returns the per-step loss terms."""
    projectors = targets["projectors"] if targets is not None else None
    params = [{"params": list(model.parameters()), "lr": lr}]
    if weights is not None and (weights.kd > 0 or weights.cross > 0):
        params.append({"params": list(projectors.parameters()), "lr": lr * cfg.projector_lr_scale})
    optimiser = torch.optim.AdamW(params, weight_decay=cfg.weight_decay)
    base_lrs = [g["lr"] for g in optimiser.param_groups]
    n = len(data["answer_id"])
    per_epoch = n // cfg.batch
    steps = epochs * per_epoch
    rng = np.random.default_rng([seed, 7])
    rows = []
    for step in range(steps):
        if step % per_epoch == 0:
            order = rng.permutation(n)
        idx = torch.from_numpy(order[(step % per_epoch) * cfg.batch:(step % per_epoch + 1) * cfg.batch])
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
        rows.append({k: v if isinstance(v, int) else float(v.detach()) for k, v in row.items()})
    return pd.DataFrame(rows)


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
        states = hidden[t_idx][:, :n_t].numpy().astype(np.float64)
        out[level] = np.stack([cluster_tokens(s, centres, cfg.lam_sp, cfg.eps_percentile, cfg.min_samples)
                               for s in states])
    return out


def _text_target(h: torch.Tensor, spans, level: str) -> dict:
    members = torch.from_numpy(group_members(spans, h.shape[1], level)).expand(h.shape[0], -1).contiguous()
    n_groups = int(members.max()) + 1
    omega, g, valid = group_weights(h, members, n_groups)
    return {"h": h, "omega": omega, "g": g, "valid": valid, "members": members}


def teacher_targets(teacher: Embedder, data: dict, cfg, seed: int) -> dict:
    """Everything a student needs from the frozen teacher, computed once (no augmentation, so the
    cache is exact): final embeddings e_q, e_a; the clusters; per layer pair the teacher's text
    states, omega^T and group vectors of question and answer (step 4), cluster vectors, the mapped
    student clusters (step 3), X^T and Pi (step 6; the code looks the attention up with the
    hidden-state index, so pair (0, 0) uses the first layer's map and the last pair has none);
    and fresh linear projectors d_S -> d_T, one per pair, drawn from ``seed``."""
    n_t = teacher.n_patches
    out_q, out_a = _forward_all(teacher, data)
    clusters = teacher_clusters(out_q["hidden"], cfg)
    pairs = []
    for t_idx, _, level in LAYER_PAIRS:
        hq, ha = out_q["hidden"][t_idx], out_a["hidden"][t_idx]
        lab = torch.from_numpy(clusters[level])
        n_k = int(lab.max()) + 1
        _, g_vis, valid_vis = group_weights(hq[:, :n_t], lab, n_k)
        q = _text_target(hq[:, n_t:n_t + task.QUESTION_LEN], task.QUESTION_PHRASES, level)
        a = _text_target(ha[:, :task.ANSWER_LEN], task.ANSWER_PHRASES, level)
        pi = None
        if t_idx < len(out_q["attn"]):
            att = out_q["attn"][t_idx][:, n_t:n_t + task.QUESTION_LEN, :n_t]
            text_onehot = (q["members"][:, :, None] == torch.arange(q["g"].shape[1])).float()
            vis_onehot = (lab[:, :, None] == torch.arange(n_k)).float()
            pi = cross_pi(att, text_onehot, vis_onehot)
        student = map_clusters(clusters[level], cfg.teacher_patch, cfg.student_patch)
        pairs.append({"q": q, "a": a, "g_vis": g_vis, "valid_vis": valid_vis, "x": _cos_matrix(q["g"], g_vis),
                      "pi": pi, "student_clusters": torch.from_numpy(student)})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        projectors = torch.nn.ModuleList(torch.nn.Linear(cfg.student_d, cfg.teacher_d) for _ in LAYER_PAIRS)
    return {"e_q": out_q["embedding"], "e_a": out_a["embedding"], "clusters": clusters, "pairs": pairs,
            "projectors": projectors}


def cluster_quality(clusters: dict, masks: torch.Tensor, cfg) -> dict:
    """Adjusted Rand index of each image's teacher clusters (noise as one label) against the
    ground-truth object label of each teacher patch (background as one label), mean over images,
    for the fine and coarse clusters; and the mean number of clusters."""
    truth = task.patch_labels(masks.numpy(), cfg.teacher_patch)
    out = {}
    for level, labels in clusters.items():
        out[f"ari_{level}"] = float(np.mean([adjusted_rand_score(t, c) for t, c in zip(truth, labels)]))
        out[f"clusters_{level}"] = float(np.mean([len(set(c[c >= 0])) for c in labels]))
    return out


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------

def evaluate(model: Embedder, data: dict) -> dict:
    """Retrieval on ``data``'s queries against the 16 answer phrases: P@1 and in-scene accuracy
    (:func:`task.retrieval_metrics`)."""
    with torch.no_grad():
        cand = model(None, torch.from_numpy(task.answer_phrases()))["embedding"]
        q, _ = _forward_all(model, {**data, "answers": data["answers"][:1].expand(len(data["answer_id"]), -1)})
        scores = (q["embedding"] @ cand.T).numpy()
    return task.retrieval_metrics(scores, data["answer_id"].numpy(), data["object_ids"].numpy())


def structure_gap(student: Embedder, test_targets: dict) -> float:
    """Structural fidelity: the mean over test queries of the mean squared difference between the
    student's and the teacher's phrase x coarse-cluster similarity matrices X (step 6's X) at the
    last layer pair, over the pairs of non-empty groups."""
    t_idx, s_idx, _ = LAYER_PAIRS[-1]
    tp = test_targets["pairs"][-1]
    with torch.no_grad():
        out_q, _ = _forward_all(student, test_targets["data"])
        h = out_q["hidden"][s_idx]
        n_s = student.n_patches
        _, g_text, _ = group_weights(h[:, n_s:n_s + task.QUESTION_LEN], tp["q"]["members"], tp["q"]["g"].shape[1])
        _, g_vis, valid = group_weights(h[:, :n_s], tp["student_clusters"], tp["g_vis"].shape[1])
        both = (valid & tp["valid_vis"])[:, None, :] & tp["q"]["valid"][:, :, None]
        sq = (_cos_matrix(g_text, g_vis) - tp["x"]).pow(2) * both
        return float((sq.sum((1, 2)) / both.sum((1, 2)).clamp_min(1)).mean())


def detach_gradient_gap(student: Embedder, data: dict, targets: dict, n: int = 64) -> float:
    """Fidelity note (a) as a check: the largest absolute difference, over all student and projector
    parameters, between the gradient of HieRD's loss with detached group vectors and that of the
    same loss without L^rel and L_cross, on the first ``n`` training examples. Zero when the
    detached structural terms pass no gradient."""
    idx = torch.arange(n)
    grads = []
    for weights in (HieRDWeights(detach_groups=True), HieRDWeights(relational=False)):
        model, proj = copy.deepcopy(student), copy.deepcopy(targets["projectors"])
        out_q = model(data["images"][idx], data["questions"][idx])
        out_a = model(None, data["answers"][idx])
        loss = hierd_loss(out_q, out_a, _take(targets["pairs"], idx), proj, model.n_patches, weights)["total"]
        params = list(model.parameters()) + list(proj.parameters())
        grads.append(torch.autograd.grad(loss, params, allow_unused=True))
    return max(float((a - b).abs().max()) if a is not None and b is not None else
               float((a if a is not None else b).abs().max()) if (a is not None or b is not None) else 0.0
               for a, b in zip(*grads))


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------

def make_embedder(cfg, role: str, seed: int) -> Embedder:
    """The teacher or student embedder of ``cfg`` (``role`` "teacher" or "student") on the task's
    vocabulary, its weights drawn from ``seed``."""
    size = {k: getattr(cfg, f"{role}_{k}") for k in ("patch", "d", "layers", "heads")}
    return Embedder(size["patch"], size["d"], size["layers"], size["heads"], vocab_size=len(task.VOCAB),
                    eos_id=task.TOKEN["<eos>"], seed=seed)


def _student(cfg, seed: int) -> Embedder:
    return make_embedder(cfg, "student", seed)


def run_teacher(cfg, data: dict) -> dict:
    """Train the teacher (contrastive, ``cfg.teacher_epochs``), evaluate it, precompute its targets on
    the train and test sets and the clusters' quality. One teacher for all seeds, as the paper
    distils one pretrained teacher."""
    seed_everything(cfg.teacher_seed)
    start = time.perf_counter()
    teacher = make_embedder(cfg, "teacher", cfg.teacher_seed)
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


def run_seed(cfg, seed: int, data: dict, teacher: dict, progress=None) -> dict:
    """Every student method of ``cfg.methods`` from the same initial weights (drawn from ``seed``),
    the same batch order and the same number of steps; their test metrics, structural gap and curves,
    and the detached-gradient check on the initial student."""
    rows, curves = [], []
    initial = _student(cfg, seed)
    for method in cfg.methods:
        seed_everything(seed)
        start = time.perf_counter()
        model = copy.deepcopy(initial)
        targets = {**teacher["targets"], "projectors": copy.deepcopy(teacher["targets"]["projectors"])}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for p in targets["projectors"]:
                p.reset_parameters()
        curve = train_embedder(model, data["train"], cfg.student_epochs, cfg.student_lr, cfg, seed, METHODS[method],
                               targets)
        model.eval()
        row = {"seed": seed, "method": method, **evaluate(model, data["test"]),
               "structure_gap": structure_gap(model, teacher["test_targets"]), "seconds": time.perf_counter() - start}
        rows.append(row)
        curves.append(curve.assign(seed=seed, method=method))
        if progress is not None:
            progress.update(1)
    check = detach_gradient_gap(initial, data["train"], teacher["targets"])
    return {"rows": rows, "curves": curves, "detach_gap": check}


def run_experiment(cfg, progress=None) -> dict:
    """The teacher, then every seed's students. Returns ``teacher`` (metrics, cluster quality,
    seconds, the model and its curve), ``results`` (one row per seed and method), ``curves``, the
    per-seed ``detach_gap`` and the data."""
    with compute_threads(1):
        data = load_data(cfg)
        teacher = run_teacher(cfg, data)
        bar = progress(total=len(cfg.seeds) * len(cfg.methods), desc="students") if progress else None
        runs = [run_seed(cfg, seed, data, teacher, bar) for seed in cfg.seeds]
        if bar is not None:
            bar.close()
    return {"teacher": teacher, "data": data,
            "results": pd.DataFrame([r for run in runs for r in run["rows"]]),
            "curves": pd.concat([c for run in runs for c in run["curves"]], ignore_index=True),
            "detach_gap": {seed: run["detach_gap"] for seed, run in zip(cfg.seeds, runs)}}


def claim_values(results: dict, cfg) -> dict:
    """Per seed, the value of each claim of ``chapter.yml``: P@1 and in-scene differences in
    percentage points, the structural-gap ratio, the teacher's cluster ARIs (one teacher: the same
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
            "h1_beats_contrastive": 100 * (hierd_p1 - get("contrastive", "p_at_1")),
            "h2_beats_global_kd": 100 * (hierd_p1 - get("global_kd", "p_at_1")),
            "m1_relations_vs_global_kd": 100 * (hierd_scene - get("global_kd", "in_scene")),
            "m2_structure_vs_global_kd": get("hierd", "structure_gap") / get("global_kd", "structure_gap"),
            "k1_detached_groups_pass_no_gradient": float(results["detach_gap"][seed]),
            "x1_coarse_cluster_ari": teacher["quality"]["ari_phrase"],
            "x2_paper_rule_ari": teacher["quality"]["ari_word_paper_rule"],
        }
    return out
