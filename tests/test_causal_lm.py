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
