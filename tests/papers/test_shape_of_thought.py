"""Tests of the SoT chapter: the toy world, the parsers, the block mask, the loss, the decoding
schedule, the inference loop's structure and the claim values (on hand-made run results)."""

import numpy as np
import pytest
import torch
import yaml
from torch.nn import functional as F

from replib.papers.shape_of_thought import experiment, method, task


def test_tables_are_valid_and_traces_cumulative():
    rng = np.random.default_rng(0)
    for k in task.COUNTS * 20:
        parts = task.sample_table(rng, k)
        states = task.render_states(parts)
        assert [p[0] for p in parts][:3] == ["TOP", "LEG_LEFT", "LEG_RIGHT"] and len(parts) == k + 1
        assert task.count_legs(states[-1]) == k and task.is_connected(states[-1])
        assert task.trace_stable(states)
        assert (task.tokens_to_image(task.image_tokens(states[-1])) == states[-1]).all()


def test_parsers_on_hand_made_images():
    img = np.zeros((8, 8), bool)
    assert task.count_legs(img) == 0 and not task.is_connected(img)
    img[1, 1:7] = True
    img[2:, 1] = img[2:, 6] = True
    assert task.count_legs(img) == 2 and task.is_connected(img)
    img[2:, 3] = True
    assert task.count_legs(img) == 3
    img[2, 3] = False  # a floating leg
    assert task.count_legs(img) == 3 and not task.is_connected(img)
    img[7, :] = True  # a floor bar joins every leg
    assert task.count_legs(img) == 1
    a = np.zeros((8, 8), bool)
    b = a.copy()
    b[0, 0] = True
    assert task.trace_stable([a, b]) and not task.trace_stable([b, a]) and not task.trace_stable([b, b])


def test_image_tokens_patch_code():
    img = np.zeros((8, 8), bool)
    img[0, 1] = img[1, 0] = True  # patch 0: bits 1 (top right) and 2 (bottom left)
    img[7, 7] = True  # last patch: bit 3
    tok = task.image_tokens(img)
    assert tok[0] == task.IMG0 + 2 + 4 and tok[15] == task.IMG0 + 8 and (tok[1:15] == task.IMG0).all()


def test_sequences_of_the_three_variants():
    parts = task.sample_table(np.random.default_rng(1), 3)
    lens = {v: len(task.build_sequence(v, 3, parts)[0]) for v in task.VARIANTS}
    assert lens == {"direct": 3 + 16, "text_cot": 3 + 4 + 16, "sot": 3 + 4 * 17 + 16}


def test_block_groups_and_mask():
    g = method.block_groups([False] + [True] * 32 + [False] + [True] * 16)
    assert (g[1:17] == 1).all() and (g[17:33] == 17).all() and g[33] == 33 and (g[34:] == 34).all()
    group = torch.tensor([[0, 1, 1, 3, 1, 1, 9]])
    noisy = torch.tensor([[False, False, False, False, True, True, False]])
    valid = torch.tensor([[True] * 6 + [False]])
    m = method.attention_mask(group, noisy, valid)[0]
    want = torch.tensor([
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0],
        [1, 0, 0, 0, 1, 1, 0],
        [1, 0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 1],
    ], dtype=torch.bool)
    assert torch.equal(m, want)


def test_training_batch_and_loss():
    rng = np.random.default_rng(2)
    recs = [task.build_sequence("sot", k, task.sample_table(rng, k)) for k in (2, 3)]
    b = method.make_training_batch(recs, np.random.default_rng(0))
    n0 = len(recs[0][0])
    tail = b["ids"][0, n0:n0 + 16]
    assert ((b["img_target"][0, n0:n0 + 16] >= 0) == (tail == task.TOK["MASK"])).all()
    assert (b["img_target"][0] >= 0).sum() >= 1 and (b["img_target"][0, :n0] < 0).all()
    seq0 = np.asarray(recs[0][0])
    for i in np.nonzero(b["text_target"][0].numpy() >= 0)[0]:
        assert b["text_target"][0, i] == seq0[i + 1] and not recs[0][1][i + 1]
    logits = torch.randn(*b["ids"].shape, len(task.VOCAB), generator=torch.Generator().manual_seed(0))
    tt, it = b["text_target"], b["img_target"]
    want = F.cross_entropy(logits[tt >= 0][:, :task.IMG0], tt[tt >= 0]) + 2 * F.cross_entropy(
        logits[it >= 0][:, task.IMG0:task.IMG0 + 16], it[it >= 0] - task.IMG0)
    assert torch.isclose(method.sot_loss(logits, b, w_img=2.0), want)


def test_unmask_schedule():
    assert method.unmask_schedule(16, 8) == [2] * 8
    assert method.unmask_schedule(16, 3) == [6, 5, 5]
    assert method.unmask_schedule(5, 1) == [5]


def test_generate_structure():
    torch.manual_seed(0)
    model = method.UnifiedDecoder(d=16, n_layer=1, seed=0)
    prompts = [[task.TOK["TABLE"], task.TOK["K2"]]] * 3
    out = method.generate(model, "sot", prompts, img_rounds=2, img_temperature=1.0, max_steps=3, seed=0)
    for o in out:
        assert len(o["rationales"]) == len(o["states"]) <= 3
        assert all(task.TOK["TOP"] <= r < task.TOK["ASSEMBLY"] for r in o["rationales"])
        assert ((o["final"] >= task.IMG0) & (o["final"] < task.IMG0 + 16)).all()
    again = method.generate(model, "sot", prompts, img_rounds=2, img_temperature=1.0, max_steps=3, seed=0)
    assert all((a["final"] == b["final"]).all() for a, b in zip(out, again))
    direct = method.generate(model, "direct", prompts, img_rounds=2, img_temperature=1.0, max_steps=3)
    assert all(o["states"] == [] for o in direct)


def test_claim_values_on_hand_made_runs():
    def row(seed, variant, num, con, stab=float("nan"), forced=float("nan")):
        return dict(seed=seed, variant=variant, n_test=100, numeracy=num, connectivity=con, stability=stab,
                    plan_length_ok=1.0, forced_stability=forced)

    rows = [row(0, "direct", 0.6, 0.5), row(0, "text_cot", 0.8, 0.6), row(0, "sot", 0.9, 0.8, 0.95, 0.97),
            row(1, "direct", 0.7, 0.4), row(1, "text_cot", 1.0, 0.9), row(1, "sot", 0.85, 0.7, 0.5, 0.6)]
    v = experiment.claim_values(rows)
    assert v[0]["p1_direct_learns"] == pytest.approx(0.6)
    assert v[0]["p2_text_cot_learns"] == pytest.approx(0.8)
    assert v[0]["p3_sot_converged"] == pytest.approx(0.97) and v[1]["p3_sot_converged"] == pytest.approx(0.6)
    assert v[0]["h1_count_vs_direct"] == pytest.approx((0.4 - 0.1) / 0.4)
    assert v[0]["h2_count_vs_text_cot"] == pytest.approx((0.2 - 0.1) / 0.2)
    assert v[0]["h3_attach_vs_direct"] == pytest.approx((0.5 - 0.2) / 0.5)
    assert v[0]["h4_attach_vs_text_cot"] == pytest.approx((0.4 - 0.2) / 0.4)
    assert v[0]["m1_trace_stability"] == pytest.approx(0.95)
    assert v[1]["h1_count_vs_direct"] == pytest.approx((0.3 - 0.15) / 0.3)
    assert v[1]["h2_count_vs_text_cot"] == pytest.approx((0.0 - 0.15) / 0.01)  # floor of 1 / n_test
    assert v[1]["h3_attach_vs_direct"] == pytest.approx((0.6 - 0.3) / 0.6)
    assert v[1]["h4_attach_vs_text_cot"] == pytest.approx((0.1 - 0.3) / 0.1)
    assert v[1]["m1_trace_stability"] == pytest.approx(0.5)
    declared = yaml.safe_load(open("notebooks/shape_of_thought/chapter.yml"))["claims"]
    assert set(v[0]) == {c["id"] for c in declared}


def test_profiles_share_keys():
    keys = {k: set(p) for k, p in experiment.EXPERIMENT_PROFILES.items()}
    assert keys["smoke"] == keys["book"] == keys["paper"]


# Reading a number back from torch's shape-only "meta" device fails with one of these; tensors left on
# the CPU while the model is elsewhere fail earlier, with "Expected all tensors to be on the same device".
META_READ = r"cannot be called on meta tensors|Cannot copy out of meta tensor"


def test_paper_profile_keeps_tensors_on_the_model_device(monkeypatch):
    monkeypatch.setenv("REPLIB_DEVICE", "meta")  # core.model_device("paper") is then "meta"
    from replib import core

    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "paper", experiment.EXPERIMENT_BOUNDS, seeds=[0], steps=2,
                         n_test=3, n_train=10, d_model=16)
    with pytest.raises((RuntimeError, NotImplementedError), match=META_READ):
        experiment.run_experiment(cfg)
    model = method.UnifiedDecoder(d=16, n_layer=1, seed=0).to("meta")
    with pytest.raises((RuntimeError, NotImplementedError), match=META_READ):
        method.generate(model, "sot", [[task.TOK["TABLE"], task.TOK["K2"]]] * 2, img_rounds=2, img_temperature=1.0)


# ---- the loss's parts, the batch's labels and the training step, by hand --------------------------------


def test_sot_loss_is_the_weighted_sum_of_closed_form_parts():
    """On a hand-made batch: CE_text over the 10 text tokens only, CE_img over the 16 patch codes only (large
    logits elsewhere are ignored), each in closed form -a + log(e^a + n - 1); L = w_ce CE_text + w_img CE_img."""
    V = len(task.VOCAB)
    logits = torch.zeros(1, 4, V)
    logits[0, 0, task.TOK["K3"]] = 2.0  # text target K3 with logit 2
    logits[0, 0, task.IMG0 + 5] = 50.0  # an image logit at a text position: outside the text vocabulary
    logits[0, 2, task.IMG0 + 7] = 1.0  # image target code 7 with logit 1
    logits[0, 2, task.TOK["MASK"]] = 50.0  # MASK and text logits at an image position: ignored
    logits[0, 2, task.TOK["TOP"]] = 50.0
    batch = dict(text_target=torch.tensor([[task.TOK["K3"], -1, -1, -1]]),
                 img_target=torch.tensor([[-1, -1, task.IMG0 + 7, -1]]))
    ce_text = -2.0 + np.log(np.exp(2.0) + 9)
    ce_img = -1.0 + np.log(np.exp(1.0) + 15)
    assert float(method.sot_loss(logits, batch)) == pytest.approx(ce_text + ce_img, rel=1e-6)
    assert float(method.sot_loss(logits, batch, w_ce=0.5, w_img=3.0)) == pytest.approx(0.5 * ce_text + 3 * ce_img,
                                                                                        rel=1e-6)
    assert float(method.sot_loss(logits, batch, w_ce=0.0)) == pytest.approx(ce_img, rel=1e-6)
    no_text = dict(text_target=torch.full((1, 4), -1), img_target=batch["img_target"])
    assert float(method.sot_loss(logits, no_text, w_ce=5.0)) == pytest.approx(ce_img, rel=1e-6)


def _run_start(is_img, i):
    """The first index of the run of image tokens that contains position i."""
    while i > 0 and is_img[i - 1]:
        i -= 1
    return i


def test_training_batch_labels_every_next_text_token_and_the_masked_clean_codes():
    """Text targets sit at exactly the positions i >= 1 whose next token is text (the label is that token);
    the noisy copy of one image block carries the block's own positions, MASK where masked, the clean code
    elsewhere, and the clean code as the target at the masked positions only."""
    rng = np.random.default_rng(3)
    recs = [task.build_sequence(v, k, task.sample_table(rng, k)) for v, k in (("sot", 2), ("text_cot", 3))]
    b = method.make_training_batch(recs, np.random.default_rng(1))
    for r, (seq, is_img) in enumerate(recs):
        n = len(seq)
        want = np.full(n, -1)
        for i in range(1, n - 1):
            if not is_img[i + 1]:
                want[i] = seq[i + 1]
        assert np.array_equal(b["text_target"][r, :n].numpy(), want)
        assert (b["text_target"][r, n:] == -1).all()
        start = int(b["pos"][r, n])
        starts = [i for i in range(n) if is_img[i] and (i - _run_start(is_img, i)) % 16 == 0]  # the blocks
        assert start in starts and np.array_equal(b["pos"][r, n:n + 16].numpy(), np.arange(start, start + 16))
        clean = torch.as_tensor(seq[start:start + 16])
        masked = b["ids"][r, n:n + 16] == task.TOK["MASK"]
        assert masked.any()
        assert torch.equal(b["ids"][r, n:n + 16][~masked], clean[~masked])
        assert torch.equal(b["img_target"][r, n:n + 16][masked], clean[masked])
        assert (b["img_target"][r, n:n + 16][~masked] == -1).all() and (b["img_target"][r, :n] == -1).all()


def test_train_model_takes_clipped_adamw_steps_down_the_hand_written_loss():
    """Two steps of ``train_model`` (different records each step): the loss is CE over the text targets (text
    vocabulary) plus CE over the masked image codes (patch codes) under the current weights; the gradient is
    clipped to norm 1, then AdamW (betas 0.9, 0.95, decay 0.01) at lr x [1/2, 0.525] (warm-up of 2 times the
    cosine to 5%) moves the weights. The clip shows at step 2, where Adam's moments mix two gradients."""
    rng = np.random.default_rng(5)
    records = [task.build_sequence(v, k, task.sample_table(rng, k)) for v in task.VARIANTS for k in task.COUNTS]
    model, losses = method.train_model(records, steps=2, batch_size=3, lr=1e-2, d=16, n_layer=1, seed=0, warmup=2)
    ref = method.UnifiedDecoder(d=16, n_layer=1, seed=0)
    params = list(ref.parameters())
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    draw = np.random.default_rng(0)
    for t, factor in enumerate([0.5, 0.525], start=1):
        batch = method.make_training_batch([records[i] for i in draw.integers(len(records), size=3)], draw)
        logits = ref(batch["ids"], batch["pos"], batch["mask"])
        tt, it = batch["text_target"], batch["img_target"]
        text_lp = F.log_softmax(logits[tt >= 0][:, :task.IMG0], -1)
        img_lp = F.log_softmax(logits[it >= 0][:, task.IMG0:task.IMG0 + 16], -1)
        loss = (-text_lp.gather(1, tt[tt >= 0][:, None]).mean()
                - img_lp.gather(1, (it[it >= 0] - task.IMG0)[:, None]).mean())
        assert losses[t - 1] == pytest.approx(float(loss.detach()), rel=1e-5), t
        grads = torch.autograd.grad(loss, params)
        norm = float(torch.sqrt(sum((g * g).sum() for g in grads)))
        assert norm > 1.0  # the clip is active
        grads = [g / (norm + 1e-6) for g in grads]
        lr = 1e-2 * factor
        with torch.no_grad():
            for k, (p, g) in enumerate(zip(params, grads)):
                m, v = 0.9 * moments[k][0] + 0.1 * g, 0.95 * moments[k][1] + 0.05 * g * g
                moments[k] = (m, v)
                p.mul_(1 - lr * 0.01).sub_(lr / (1 - 0.9 ** t) * m / ((v / (1 - 0.95 ** t)).sqrt() + 1e-8))
    for (name, p), q in zip(model.named_parameters(), params):
        diff = (p - q).detach().abs()
        if name.endswith("qkv.bias"):  # the key bias has a zero gradient (softmax is shift-invariant) up to
            diff = torch.cat([diff[:16], diff[32:]])  # rounding, which Adam's normalisation blows up
        assert float(diff.max()) < 1e-6, name  # a step moves a weight by about 5e-3


# ---- image-block matching, the stacked seeds, the teacher-forced stability (issue 38) -------------------


def test_every_record_trains_its_final_image_and_sot_one_state():
    """With ``final_always`` (the default) the first noisy copy of every record is its final image; a SoT
    record gets a second copy at one of its states (never the final one), a direct or text-only record none.
    Without it, one block among the k + 2 images of a SoT record: the final one about 1 / (k + 2) of the time."""
    rng = np.random.default_rng(4)
    recs = [task.build_sequence(v, k, task.sample_table(rng, k)) for v in task.VARIANTS for k in task.COUNTS]
    enc = method.EncodedRecords(recs)
    b = method.make_training_batch(enc, np.random.default_rng(0))
    for r, (seq, is_img) in enumerate(recs):
        n = len(seq)
        assert int(b["pos"][r, n]) == n - 16  # the final image block
        assert torch.equal(b["pos"][r, n:n + 16], torch.arange(n - 16, n))
        second = b["img_target"][r, n + 16:n + 32] if b["ids"].shape[1] >= n + 32 else torch.tensor([])
        if enc.n_states[r] > 0:
            start = int(b["pos"][r, n + 16])
            assert start in enc.state_starts[r] and start != n - 16
            assert (b["img_target"][r, n + 16:n + 32] >= 0).any()
        else:
            assert (second == -1).all() and (b["ids"][r, n + 16:] == task.TOK["PAD"]).all()
    sot = [task.build_sequence("sot", 2, task.sample_table(rng, 2))] * 400  # 3 states + the final image
    old = method.make_training_batch(sot, np.random.default_rng(1), final_always=False)
    n = len(sot[0][0])
    assert b["ids"].shape[1] >= n and old["ids"].shape[1] == n + 16
    share_final = float((old["pos"][:, n] == n - 16).float().mean())
    assert abs(share_final - 0.25) < 0.06


def test_stacked_seeds_train_exactly_as_each_seed_alone():
    """train_models over two seeds (one stacked model, per-seed clipping, one AdamW over stacked tensors, batches
    padded to a common length) gives the same weights and losses as training each seed alone, which
    test_train_model_takes_clipped_adamw_steps_down_the_hand_written_loss checks against the hand-written loss."""
    rng = np.random.default_rng(6)
    recs_a = [task.build_sequence("sot", k, task.sample_table(rng, k)) for k in (2, 3, 3)]
    recs_b = [task.build_sequence("direct", k, task.sample_table(rng, k)) for k in (2, 3)]
    models, losses = method.train_models([recs_a, recs_b], [0, 7], steps=3, batch_size=3, lr=1e-2, d=16,
                                         n_layer=1, warmup=2)
    for recs, seed, model, curve in zip((recs_a, recs_b), (0, 7), models, losses):
        alone, alone_curve = method.train_model(recs, steps=3, batch_size=3, lr=1e-2, d=16, n_layer=1, seed=seed,
                                                warmup=2)
        assert np.allclose(curve, alone_curve, rtol=1e-5)
        for (name, p), q in zip(model.named_parameters(), alone.parameters()):
            diff = (p - q).detach().abs()
            if name.endswith("qkv.bias"):  # the key bias: zero gradient up to rounding, blown up by Adam
                diff = torch.cat([diff[:16], diff[32:]])
            assert float(diff.max()) < 1e-5, name
    assert not torch.allclose(models[0].head.weight, models[1].head.weight)


def test_stacked_forward_matches_each_model():
    from torch.func import stack_module_state

    models = [method.UnifiedDecoder(d=16, n_layer=2, seed=s) for s in (0, 1, 2)]
    params, _ = stack_module_state(models)
    rng = np.random.default_rng(0)
    recs = [task.build_sequence("sot", k, task.sample_table(rng, k)) for k in (2, 3)]
    b = method.make_training_batch(recs, rng)
    out = method.stacked_forward(params, *(torch.stack([b[k]] * 3) for k in ("ids", "pos", "mask")))
    for s, m in enumerate(models):
        assert torch.allclose(out[s], m(b["ids"], b["pos"], b["mask"]), atol=1e-5)


def test_one_stacked_step_descends_the_loss_on_a_fixed_batch():
    """One plain gradient step on the stacked parameters, on a fixed batch, lowers every seed's sot_loss (a sign
    error, a detached tensor or a dropped term in the stacked forward would not)."""
    from torch.func import stack_module_state, vmap

    models = [method.UnifiedDecoder(d=16, n_layer=1, seed=s) for s in (0, 1)]
    params, _ = stack_module_state(models)
    params = {k: v.detach().requires_grad_() for k, v in params.items()}
    rng = np.random.default_rng(1)
    recs = [task.build_sequence("sot", k, task.sample_table(rng, k)) for k in (2, 3, 2)]
    b = method.make_training_batch(recs, rng)
    st = {k: torch.stack([v] * 2) for k, v in b.items()}
    per_seed = vmap(lambda lg, tt, it: method.sot_loss(lg, dict(text_target=tt, img_target=it)))

    def losses():
        return per_seed(method.stacked_forward(params, st["ids"], st["pos"], st["mask"]), st["text_target"],
                        st["img_target"])

    before = losses()
    before.sum().backward()
    with torch.no_grad():
        for p in params.values():
            p.sub_(1e-2 * p.grad)
        after = losses()
    assert (after < before.detach() - 1e-4).all()
    for s, m in enumerate(models):
        assert float(before[s]) == pytest.approx(float(method.sot_loss(m(b["ids"], b["pos"], b["mask"]), b)), rel=1e-5)


def test_teacher_forced_stability_bookkeeping(monkeypatch):
    """The context of step n holds the prompt, the true (rationale, state) pairs before n and rationale n; a
    drawer that copies the previous true state and adds a pixel scores 1, one that only copies scores 0, and one
    that drops a pixel of the previous state at one step of one trace makes that trace alone unstable."""
    rng = np.random.default_rng(8)
    tables = [(k, task.sample_table(rng, k)) for k in (2, 3, 3)]
    seen = []

    def drawer(mode):
        def fake(model, contexts, flags, rounds, temperature, gen):
            out = []
            for i, (ctx, fl) in enumerate(zip(contexts, flags)):
                assert not fl[-1] and task.TOK["TOP"] <= ctx[-1] < task.TOK["ASSEMBLY"]
                prev = (task.tokens_to_image(ctx[-1 - task.IMG_LEN:-1]) if len(ctx) > 3
                        else np.zeros((task.H, task.W), bool))
                img = prev.copy()
                free = np.argwhere(~img)[0]
                if mode != "copy":
                    img[tuple(free)] = True
                if mode == "drop" and i == 5:
                    img[tuple(np.argwhere(prev)[0])] = False
                out.append(task.image_tokens(img))
            seen.append(len(contexts))
            return torch.as_tensor(np.array(out))
        return fake

    for mode, want in (("add", 1.0), ("copy", 0.0), ("drop", 2 / 3)):
        monkeypatch.setattr(experiment, "generate_image", drawer(mode))
        got = experiment.teacher_forced_stability(None, tables, img_rounds=2, img_temperature=1.0, seed=0)
        assert got == pytest.approx(want), mode
    assert seen[0] == 3 + 4 + 4  # one context per step: k + 1 steps per table


# ---- edges of the block layout and of the image-block draw (issue 44) -----------------------------------


def test_block_groups_when_the_sequence_opens_with_an_image_run():
    """An image run at position 0 starts its blocks at 0: tokens 0-15 are group 0, 16-19 group 16; a later run
    restarts the count at its own first token."""
    g = method.block_groups([True] * 20 + [False] + [True] * 3)
    assert g.tolist() == [0] * 16 + [16] * 4 + [20] + [21] * 3


def test_training_batch_draws_each_records_state_uniformly_and_trains_a_lone_state():
    """With final_always each record draws its own intermediate state, uniformly over all of them (the last
    included), and a record with a single state image gets it as its second noisy copy."""
    rng = np.random.default_rng(4)
    rec = task.build_sequence("sot", 2, task.sample_table(rng, 2))
    enc = method.EncodedRecords([rec])
    n, states = len(rec[0]), enc.state_starts[0, :enc.n_states[0]].tolist()
    b = method.make_training_batch([rec] * 600, np.random.default_rng(0))
    picked = b["pos"][:, n + 16].numpy()
    share = np.array([np.mean(picked == s) for s in states])
    assert len(states) >= 3 and np.abs(share - 1 / len(states)).max() < 0.06
    img = [method.IMG0 + c for c in range(16)]
    seq = [task.TOK["TABLE"], task.TOK["K2"], task.TOK["TOP"]] + img + [task.TOK["ASSEMBLY"]] + img[::-1]
    flags = [False] * 3 + [True] * 16 + [False] + [True] * 16
    lone = method.make_training_batch([(seq, flags)], np.random.default_rng(1))
    assert lone["ids"].shape[1] == len(seq) + 32
    assert lone["pos"][0, len(seq) + 16:].tolist() == list(range(3, 19))  # the state block, after the final one
    assert (lone["img_target"][0, len(seq) + 16:] >= 0).any()


def test_sot_loss_counts_a_label_of_id_zero():
    """Every position with a target >= 0 is labelled, the token of id 0 (PAD) included: CE_text over two positions
    whose labels are ids 0 and 1, with zero logits, is log 10 (the text vocabulary has 10 tokens)."""
    V = len(task.VOCAB)
    logits = torch.zeros(1, 3, V)
    logits[0, 0, 0] = 1.0
    batch = dict(text_target=torch.tensor([[0, 1, -1]]), img_target=torch.full((1, 3), -1))
    want = ((-1.0 + np.log(np.e + 9)) + np.log(10)) / 2  # label 0 with logit 1 at position 0; label 1, flat logits
    assert float(method.sot_loss(logits, batch)) == pytest.approx(want, rel=1e-6)


def _logits_alone(model, seq, flags):
    """Logits of one clean sequence, no padding, under the block mask (its last image run attends to itself)."""
    L = len(seq)
    group = torch.as_tensor(method.block_groups(flags))[None]
    mask = method.attention_mask(group, torch.zeros(1, L, dtype=torch.bool), torch.ones(1, L, dtype=torch.bool))
    with torch.no_grad():
        return model(torch.as_tensor(seq)[None], torch.arange(L)[None], mask)[0]


def _reference_generate_image(model, seqs, flags, rounds, temperature, gen):
    """Parallel decoding written out, one context at a time: 16 MASK tokens appended as a block; each round every
    masked token is drawn from its patch-code softmax at the temperature (one draw per token of the batch, in
    order), and the n_new most confident draws (probability of the drawn code) among the still-masked are kept."""
    n = 16
    block = [[method.MASK] * n for _ in seqs]
    done = [int(np.ceil(n * s / rounds)) for s in range(rounds + 1)]
    for n_new in np.diff(done):
        probs = torch.cat([F.softmax(_logits_alone(model, s + blk, f + [True] * n)[len(s):, method.IMG0:method.IMG0 + n]
                                     / temperature, -1) for s, f, blk in zip(seqs, flags, block)])
        draw = torch.multinomial(probs, 1, generator=gen)[:, 0].view(len(seqs), n)
        conf = probs.gather(1, draw.view(-1, 1)).view(len(seqs), n)
        for b, blk in enumerate(block):
            masked = [j for j in range(n) if blk[j] == method.MASK]
            for j in sorted(masked, key=lambda j: -float(conf[b, j]))[:n_new]:
                blk[j] = method.IMG0 + int(draw[b, j])
    return block


def test_generate_image_matches_parallel_decoding_written_out():
    """generate_image on a batch of contexts of different lengths (right-padded together) gives, draw for draw,
    the blocks of the decoding loop written out context by context: linear unmasking schedule, sampling at the
    temperature, the most confident masked tokens kept each round."""
    model = method.UnifiedDecoder(d=16, n_layer=1, seed=3)
    img = task.image_tokens(task.render_states(task.sample_table(np.random.default_rng(0), 2))[0]).tolist()
    seqs = [[task.TOK["TABLE"], task.TOK["K2"], task.TOK["TOP"]],
            [task.TOK["TABLE"], task.TOK["K3"], task.TOK["TOP"]] + img + [task.TOK["LEG_LEFT"]]]
    flags = [[False] * 3, [False] * 3 + [True] * 16 + [False]]
    for rounds, temperature in ((3, 0.7), (5, 1.5)):
        got = method.generate_image(model, seqs, flags, rounds, temperature, torch.Generator().manual_seed(5))
        want = _reference_generate_image(model, seqs, flags, rounds, temperature, torch.Generator().manual_seed(5))
        assert got.tolist() == want, (rounds, temperature)


def _reference_generate(model, variant, prompts, img_rounds, img_temperature, text_temperature, max_steps, seed):
    """The inference loop written out, context by context: draw a rationale or ASSEMBLY token (logits below TOP
    forbidden, softmax at the text temperature, one draw per active context); ASSEMBLY is forced after max_steps
    rationales; for SoT each rationale is followed by its generated state image; finally every context gets its
    final image. One CPU generator seeded by ``seed`` for every draw."""
    gen = torch.Generator().manual_seed(seed)
    seqs, flags = [list(p) for p in prompts], [[False] * len(p) for p in prompts]
    out = [dict(rationales=[], states=[]) for _ in prompts]
    active = list(range(len(prompts)))
    for _ in range(max_steps + 1):
        if not active:
            break
        lg = torch.stack([_logits_alone(model, seqs[b], flags[b])[-1, :method.N_TEXT] for b in active])
        lg[:, :task.TOK["TOP"]] = -float("inf")
        tokens = torch.multinomial(F.softmax(lg / text_temperature, -1), 1, generator=gen)[:, 0].tolist()
        still = []
        for b, t in zip(active, tokens):
            t = task.TOK["ASSEMBLY"] if len(out[b]["rationales"]) >= max_steps else t
            seqs[b].append(t)
            flags[b].append(False)
            if t != task.TOK["ASSEMBLY"]:
                out[b]["rationales"].append(t)
                still.append(b)
        if variant == "sot" and still:
            imgs = method.generate_image(model, [seqs[b] for b in still], [flags[b] for b in still], img_rounds,
                                         img_temperature, gen)
            for b, img in zip(still, imgs.tolist()):
                seqs[b] += img
                flags[b] += [True] * 16
                out[b]["states"].append(img)
        active = still
    finals = method.generate_image(model, seqs, flags, img_rounds, img_temperature, gen)
    return [dict(o, final=f) for o, f in zip(out, finals.tolist())]


def test_generate_follows_the_inference_loop_written_out():
    """generate (SoT, three prompts, a hot text temperature so that contexts stop at different steps, one forced to
    ASSEMBLY by max_steps) and direct generation with the defaults (text temperature 0.3, at most 6 rationales,
    seed 0) give the rationales, states and final images of the loop written out."""
    model = method.UnifiedDecoder(d=16, n_layer=1, seed=1)
    prompts = [[task.TOK["TABLE"], task.TOK[k]] for k in ("K2", "K3")]
    got = method.generate(model, "sot", prompts, img_rounds=2, img_temperature=1.0, text_temperature=2.0,
                          max_steps=2, seed=1)
    want = _reference_generate(model, "sot", prompts, 2, 1.0, 2.0, 2, 1)
    for g, w in zip(got, want):
        assert g["rationales"] == w["rationales"] and [s.tolist() for s in g["states"]] == w["states"]
        assert g["final"].tolist() == w["final"]
    lengths = [len(w["rationales"]) for w in want]
    assert 2 in lengths and len(set(lengths)) > 1
    got = method.generate(model, "direct", prompts, img_rounds=2, img_temperature=1.0)
    want = _reference_generate(model, "direct", prompts, 2, 1.0, 0.3, 6, 0)
    assert [g["rationales"] for g in got] == [w["rationales"] for w in want]
    assert [g["final"].tolist() for g in got] == [w["final"] for w in want] and all(g["states"] == [] for g in got)


def test_unified_decoder_defaults_and_seeding():
    """The default decoder: width 64, 2 blocks of 4 heads, 160 positions, one head over the 27-token vocabulary,
    initialised from seed 0 (the same weights as seed=0, other weights for seed 1), without touching torch's global
    generator."""
    state = torch.random.get_rng_state()
    model = method.UnifiedDecoder()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert model.tok.weight.shape == (27, 64) and model.pos.weight.shape == (160, 64) and len(model.layers) == 2
    assert model.layers[0].n_head == 4 and model.head.weight.shape == (27, 64)
    assert torch.equal(model.head.weight, method.UnifiedDecoder(seed=0).head.weight)
    assert not torch.equal(model.head.weight, method.UnifiedDecoder(seed=1).head.weight)


def test_train_model_and_train_models_share_the_release_defaults():
    """One step with the defaults: train_model (one seed, seed 0) and train_models over [0] take the same step
    (batch 32, lr 3e-3 warmed up over 50 steps, final image always trained) on the same 64-wide, 2-block model."""
    rng = np.random.default_rng(7)
    records = [task.build_sequence("direct", k, task.sample_table(rng, k)) for k in task.COUNTS]  # short: cheap
    model, losses = method.train_model(records, steps=1)
    (other,), other_losses = method.train_models([records], [0], steps=1)
    assert model.tok.weight.shape == (27, 64) and len(model.layers) == 2
    assert losses == pytest.approx(other_losses[0].tolist(), rel=1e-6)
    for p, q in zip(model.parameters(), other.parameters()):
        assert torch.allclose(p, q, atol=1e-7)
    assert not torch.equal(model.head.weight, method.UnifiedDecoder(seed=0).head.weight)  # the step moved it


def test_encoded_records_padding_and_integer_flags():
    """EncodedRecords pads token rows with PAD and state starts with -1 (integer arrays), and reads image flags
    given as 0/1 integers as it reads booleans (the same batch)."""
    rng = np.random.default_rng(9)
    recs = [task.build_sequence("direct", 2, task.sample_table(rng, 2)),
            task.build_sequence("sot", 3, task.sample_table(rng, 3))]
    enc = method.EncodedRecords(recs)
    n0 = len(recs[0][0])
    assert enc.seq.dtype.kind == "i" and enc.group.dtype.kind == "i"
    assert (enc.seq[0, n0:] == method.PAD).all() and enc.seq.shape[1] == len(recs[1][0])
    assert enc.n_states.tolist() == [0, 4] and (enc.state_starts[0] == -1).all()
    as_ints = [(seq, [int(f) for f in flags]) for seq, flags in recs]
    a = method.make_training_batch(recs, np.random.default_rng(2))
    b = method.make_training_batch(as_ints, np.random.default_rng(2))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_masked_share_follows_t_uniform_between_t_min_and_one():
    """Each noisy copy masks each token with probability t ~ U(t_min, 1), plus one token always: over many copies a
    token is masked with probability E[t] + (1 - E[t]) / 16, E[t] = (t_min + 1) / 2 (t_min 0.05 by default)."""
    rng = np.random.default_rng(4)
    rec = task.build_sequence("direct", 2, task.sample_table(rng, 2))
    n = len(rec[0])
    for t_min in (0.05, 0.9):
        mean_t = (t_min + 1) / 2
        want = mean_t + (1 - mean_t) / 16
        kw = {} if t_min == 0.05 else dict(t_min=t_min)  # the default, then an explicit one
        b = method.make_training_batch([rec] * 500, np.random.default_rng(0), **kw)
        share = float((b["ids"][:, n:n + 16] == method.MASK).float().mean())
        assert share == pytest.approx(want, abs=0.03), t_min


def test_generate_flags_exactly_the_image_tokens_and_stops_at_max_steps(monkeypatch):
    """Every context the model reads during generation flags exactly its image tokens (prompt and rationales are
    text, states are images); a model that never says ASSEMBLY is stopped after the default 6 rationales."""
    seen = []
    real = method._forward_last

    def spy(model, seqs, flags, extra_block):
        seen.extend(zip(seqs, flags))
        return real(model, seqs, flags, extra_block)

    monkeypatch.setattr(method, "_forward_last", spy)
    model = method.UnifiedDecoder(d=16, n_layer=1, seed=2)
    with torch.no_grad():
        model.head.bias[task.TOK["ASSEMBLY"]] -= 100.0  # ASSEMBLY never drawn
    prompts = [[task.TOK["TABLE"], task.TOK["K2"]], [task.TOK["TABLE"], task.TOK["K4"]]]
    out = method.generate(model, "sot", prompts, img_rounds=1, img_temperature=1.0, max_steps=2)
    assert [len(o["rationales"]) for o in out] == [2, 2] and [len(o["states"]) for o in out] == [2, 2]
    out = method.generate(model, "direct", prompts, img_rounds=1, img_temperature=1.0)
    assert [len(o["rationales"]) for o in out] == [6, 6]
    assert seen and all(list(f) == [t >= method.IMG0 for t in s] for s, f in seen)


def test_sot_loss_parts_and_pad_batch():
    """sot_loss with parts returns (L, (CE_text, CE_img)) with L their weighted sum; _pad_batch right-pads ids with
    PAD, positions with 0 and targets with -1, each padding query seeing only itself (also for one extra column),
    and leaves a batch of the target length as it is."""
    rng = np.random.default_rng(2)
    recs = [task.build_sequence("sot", k, task.sample_table(rng, k)) for k in (2, 3)]
    b = method.make_training_batch(recs, np.random.default_rng(0))
    logits = torch.randn(*b["ids"].shape, len(task.VOCAB), generator=torch.Generator().manual_seed(1))
    loss, (ce_text, ce_img) = method.sot_loss(logits, b, w_ce=0.5, w_img=2.0, parts=True)
    assert float(loss) == pytest.approx(0.5 * float(ce_text) + 2.0 * float(ce_img), rel=1e-6)
    assert float(ce_text) == pytest.approx(float(method.sot_loss(logits, b, w_img=0.0)), rel=1e-6)
    L0 = b["ids"].shape[1]
    assert method._pad_batch(b, L0) is b
    for extra in (1, 3):
        p = method._pad_batch(b, L0 + extra)
        assert (p["ids"][:, L0:] == method.PAD).all() and (p["pos"][:, L0:] == 0).all()
        assert (p["text_target"][:, L0:] == -1).all() and (p["img_target"][:, L0:] == -1).all()
        assert torch.equal(p["mask"][:, :L0, :L0], b["mask"]) and not p["mask"][:, :L0, L0:].any()
        assert torch.equal(p["mask"][:, L0:, :], torch.eye(L0 + extra, dtype=torch.bool)[L0:].expand(2, -1, -1))


def test_training_batch_layout_clean_part_padding_and_visibility():
    """Each row starts with its clean record (its tokens at positions 0..n-1), padding rows carry PAD at position 0
    and are invisible to every real token; no clean token sees a noisy copy; every noisy copy has a masked token."""
    rng = np.random.default_rng(3)
    recs = [task.build_sequence(v, k, task.sample_table(rng, k)) for v, k in (("direct", 2), ("sot", 3), ("text_cot", 4))]
    b = method.make_training_batch(recs * 40, np.random.default_rng(5))
    enc = method.EncodedRecords(recs)
    for r, (seq, _) in enumerate(recs):
        n = len(seq)
        total = n + 16 * (1 + int(enc.n_states[r] > 0))
        assert b["ids"][r, :n].tolist() == list(seq) and b["pos"][r, :n].tolist() == list(range(n))
        assert (b["ids"][r, total:] == method.PAD).all() and (b["pos"][r, total:] == 0).all()
        assert not b["mask"][r, :total, total:].any()  # padding keys hidden from real queries
        assert not b["mask"][r, :n, n:].any()  # the clean record never sees its noisy copies
        assert not b["mask"][r, 0, 1] and b["mask"][r, 1, 0] and b["mask"][r, n, 0]  # causal text; copies see the prompt
        pad = b["mask"][r, total:]
        assert torch.equal(pad, torch.eye(b["ids"].shape[1], dtype=torch.bool)[total:])  # a padding query sees itself
    n0 = len(recs[0][0])
    assert (b["ids"][::3, n0:n0 + 16] == method.MASK).any(1).all()  # at least one masked token per copy


def test_train_models_start_from_each_seed_and_pass_the_block_choice():
    """With no step each returned model holds its seed's initial weights; final_always reaches the batches (the
    earlier scheme gives another first loss), through train_model too."""
    rng = np.random.default_rng(6)
    recs = [task.build_sequence("sot", k, task.sample_table(rng, k)) for k in (2, 3)]
    small = dict(d=16, n_layer=1, batch_size=4, warmup=2)
    (m3,), _ = method.train_models([recs], [3], steps=0, **small)
    assert all(torch.equal(p, q) for p, q in zip(m3.parameters(), method.UnifiedDecoder(d=16, n_layer=1, seed=3).parameters()))
    _, new = method.train_models([recs], [0], steps=1, **small)
    _, old = method.train_models([recs], [0], steps=1, final_always=False, **small)
    _, old_alone = method.train_model(recs, steps=1, final_always=False, **small)
    assert new[0, 0] != pytest.approx(old[0, 0]) and old_alone == pytest.approx(old[0].tolist())
