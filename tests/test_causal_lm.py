"""The shared tiny causal LM: cached sampling agrees with full forward passes, log-probabilities add
up, beam search finds the best sequence when the beams cover every sequence, training learns."""

import itertools

import numpy as np
import pytest
import torch

from replib.models import causal_lm as lm

PAD, EOS = 0, 1


@pytest.fixture(scope="module")
def model():
    return lm.tiny_gpt(6, n_layer=1, n_embd=16, n_head=2, n_positions=16, seed=3)


def test_weights_depend_on_seed_only():
    a, b, c = (lm.tiny_gpt(6, n_embd=16, n_layer=1, n_head=2, seed=s) for s in (0, 0, 1))
    sa, sb, sc = (m.state_dict() for m in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_greedy_with_cache_matches_full_forward(model):
    prompts = torch.tensor([[2, 3, 4], [5, 4, 2], [3, 3, 3]])
    out, logprob = lm.sample(model, prompts, 5, eos_id=EOS, pad_id=PAD, temperature=0)
    for row in range(3):
        ids = prompts[row].tolist()
        total = 0.0
        for t in range(5):
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1], -1)
            token = int(logp.argmax())
            assert out[row, t] == token
            total += float(logp[token])
            ids.append(token)
            if token == EOS:
                assert (out[row, t + 1:] == PAD).all()
                break
        assert logprob[row] == pytest.approx(total, abs=1e-4)


def test_sample_logprob_equals_sequence_logprob(model):
    prompts = torch.tensor([[2, 3, 4]] * 50)
    out, logprob = lm.sample(model, prompts, 6, eos_id=EOS, pad_id=PAD, generator=torch.Generator().manual_seed(0))
    ids = torch.cat([prompts, out], 1)
    mask = torch.cat([torch.zeros_like(prompts, dtype=torch.bool), lm.completion_mask(out, EOS)], 1)
    with torch.no_grad():
        again = lm.sequence_logprob(model, ids, mask)
    assert torch.allclose(again, logprob, atol=1e-4)


def test_sampling_is_seeded_and_follows_the_model(model):
    prompts = torch.tensor([[2, 3]] * 4000)
    a, _ = lm.sample(model, prompts, 1, eos_id=EOS, pad_id=PAD, generator=torch.Generator().manual_seed(1))
    b, _ = lm.sample(model, prompts, 1, eos_id=EOS, pad_id=PAD, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    with torch.no_grad():
        p = torch.softmax(model(prompts[:1]).logits[0, -1], -1).numpy()
    freq = np.bincount(a[:, 0].numpy(), minlength=6) / 4000
    assert np.abs(freq - p).max() < 0.03


def test_completion_mask():
    out = torch.tensor([[4, 1, 0, 0], [4, 4, 4, 4], [1, 0, 0, 0]])
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(lm.completion_mask(out, EOS), expected)


def test_beam_search_with_enough_beams_is_exact(model):
    prompt = torch.tensor([[2, 3]])
    best, best_score = None, -np.inf
    for length in range(1, 4):
        for body in itertools.product([2, 3, 4, 5], repeat=length - 1):
            for last in [1, 2, 3, 4, 5] if length == 3 else [1]:
                seq = list(body) + [last]
                ids = torch.tensor([[2, 3, *seq]])
                mask = torch.zeros_like(ids, dtype=torch.bool)
                mask[0, 2:] = True
                with torch.no_grad():
                    score = float(lm.sequence_logprob(model, ids, mask))
                if score > best_score:
                    best, best_score = seq, score
    found = lm.beam_search(model, prompt, 3, num_beams=64, eos_id=EOS, pad_id=PAD)[0].tolist()
    assert found[: len(best)] == best


def test_training_learns_a_copy_task():
    model = lm.tiny_gpt(8, n_layer=1, n_embd=32, n_head=2, n_positions=8, seed=0)

    def draw(rng):
        x = rng.integers(2, 8, size=(64, 1))
        ids = np.concatenate([x, x, np.full((64, 1), EOS)], 1)
        mask = np.zeros_like(ids, dtype=bool)
        mask[:, 1:] = True
        return ids, mask

    losses = lm.train_lm(model, draw, steps=150, lr=1e-2, warmup=10, seed=0)
    assert losses[-10:].mean() < 0.1 < losses[0]
    prompts = torch.arange(2, 8)[:, None]
    out, _ = lm.sample(model, prompts, 2, eos_id=EOS, pad_id=PAD, temperature=0)
    assert torch.equal(out[:, 0], prompts[:, 0]) and (out[:, 1] == EOS).all()


# ---- training and log-probability steps, pinned against hand-written objectives ------------------------


def _hand_masked_ce(model, ids, mask):
    """The documented objective of ``train_lm``, written out: the mean over the masked positions t >= 1 of
    -log p(ids[t] | ids[:t]), each read from a forward pass over the whole row (a causal model)."""
    logp = torch.log_softmax(model(ids).logits, -1)
    terms = [-logp[b, t - 1, ids[b, t]] for b in range(ids.shape[0]) for t in range(1, ids.shape[1]) if mask[b, t]]
    return torch.stack(terms).mean()


def _hand_adamw(params, grads, state, lr, t, wd=0.01, betas=(0.9, 0.999), eps=1e-8):
    """One AdamW step written out (decoupled decay, bias-corrected moments), in place."""
    with torch.no_grad():
        for k, (p, g) in enumerate(zip(params, grads)):
            m, v = state.setdefault(k, (torch.zeros_like(p), torch.zeros_like(p)))
            m = betas[0] * m + (1 - betas[0]) * g
            v = betas[1] * v + (1 - betas[1]) * g * g
            state[k] = (m, v)
            p.mul_(1 - lr * wd)
            p.sub_(lr / (1 - betas[0] ** t) * m / ((v / (1 - betas[1] ** t)).sqrt() + eps))


_LM_BATCHES = [  # (ids, target mask): different rows and masks at every step
    (np.array([[2, 3, 4, 1, 0], [5, 2, 2, 3, 1]]), np.array([[0, 0, 1, 1, 0], [0, 1, 1, 1, 1]], bool)),
    (np.array([[3, 3, 5, 4, 1], [4, 2, 1, 0, 0]]), np.array([[0, 0, 0, 1, 1], [0, 0, 1, 0, 0]], bool)),
    (np.array([[5, 4, 3, 2, 1], [2, 5, 5, 1, 0]]), np.array([[0, 1, 1, 1, 1], [0, 0, 1, 1, 0]], bool)),
    (np.array([[2, 2, 2, 2, 1], [3, 4, 5, 2, 1]]), np.array([[0, 0, 0, 0, 1], [0, 0, 0, 1, 1]], bool)),
]


def _double_gpt():
    return lm.tiny_gpt(6, n_layer=1, n_embd=8, n_head=2, n_positions=8, seed=5).double()


def test_train_lm_first_step_descends_the_masked_cross_entropy():
    """Step 1 of AdamW is p <- p (1 - lr wd) - lr g / (|g| + eps), g the gradient of the hand-written masked CE:
    pins the loss's sign, its label shift (token t from the prefix before it), the mask and the mean."""
    model, ref = _double_gpt(), _double_gpt()
    ids, mask = (torch.as_tensor(a) for a in _LM_BATCHES[0])
    want = _hand_masked_ce(ref, ids, mask)
    grads = torch.autograd.grad(want, list(ref.parameters()))
    losses = lm.train_lm(model, lambda rng: _LM_BATCHES[0], steps=1, lr=1e-3, warmup=1, seed=0)
    assert losses[0] == pytest.approx(float(want.detach()), rel=1e-10)
    for p, p0, g in zip(model.parameters(), ref.parameters(), grads):
        step = p0.detach() * (1 - 1e-3 * 0.01) - 1e-3 * g / (g.abs() + 1e-8)
        assert torch.allclose(p.detach(), step, rtol=0, atol=1e-9)
    assert float(_hand_masked_ce(model, ids, mask).detach()) < float(want.detach())  # the objective went down


def test_train_lm_four_steps_follow_warmup_cosine_adamw_on_fresh_batches():
    """Steps 2-4 (a different batch each): Adam's moments carry over and the learning rate follows the
    warm-up (2 steps: 1/2, 1) then the cosine to zero over the remaining 2 steps (1, 1/2)."""
    model, ref = _double_gpt(), _double_gpt()
    draws = iter(_LM_BATCHES)
    losses = lm.train_lm(model, lambda rng: next(draws), steps=4, lr=2e-3, warmup=2, seed=0)
    params, state = list(ref.parameters()), {}
    for t, (factor, (ids, mask)) in enumerate(zip([0.5, 1.0, 1.0, 0.5], _LM_BATCHES), start=1):
        loss = _hand_masked_ce(ref, torch.as_tensor(ids), torch.as_tensor(mask))
        assert losses[t - 1] == pytest.approx(float(loss.detach()), rel=1e-10), t
        _hand_adamw(params, torch.autograd.grad(loss, params), state, 2e-3 * factor, t)
    for p, q in zip(model.parameters(), params):
        assert torch.allclose(p.detach(), q.detach(), rtol=0, atol=1e-9)


def test_sequence_logprob_is_the_prefix_by_prefix_sum_and_ascends(model):
    """log pi(y | x) summed over the mask from one forward per prefix (no shift error); one gradient-ascent
    step on it (the policy-gradient direction with a positive advantage) raises it."""
    ids = torch.tensor([[2, 3, 4, 5, 1], [3, 2, 5, 1, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 0]], dtype=torch.bool)
    want = []
    with torch.no_grad():
        for b in range(2):
            want.append(sum(float(torch.log_softmax(model(ids[b:b + 1, :t]).logits[0, -1], -1)[ids[b, t]])
                            for t in range(1, 5) if mask[b, t]))
        tok = lm.token_logprobs(model, ids)
        first = float(torch.log_softmax(model(ids[:1, :1]).logits[0, -1], -1)[3])
    assert torch.allclose(lm.sequence_logprob(model, ids, mask).detach(), torch.tensor(want), atol=1e-5)
    assert tok.shape == (2, 4) and float(tok[0, 0]) == pytest.approx(first, abs=1e-5)
    ascend = lm.tiny_gpt(6, n_layer=1, n_embd=16, n_head=2, n_positions=16, seed=3)
    before = lm.sequence_logprob(ascend, ids, mask).sum()
    grads = torch.autograd.grad(before, list(ascend.parameters()))
    before = float(before.detach())
    with torch.no_grad():
        for p, g in zip(ascend.parameters(), grads):
            p.add_(1e-2 * g)
        assert float(lm.sequence_logprob(ascend, ids, mask).sum()) > before
