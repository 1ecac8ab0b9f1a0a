"""Unit tests of replib.models.masked_lm (the two-head bidirectional transformer)."""

import torch

from replib.models.masked_lm import TwoHeadMLM


def small(seed=0):
    return TwoHeadMLM(15, n_layer=1, n_embd=16, n_head=2, max_len=17, seed=seed)


def test_seed_determinism_and_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, b, c = small(0), small(0), small(1)
    assert torch.equal(torch.rand(1), before)  # the global RNG was not consumed
    ids = torch.randint(0, 15, (3, 17), generator=torch.Generator().manual_seed(0))
    for x, y in zip(a(ids), b(ids)):
        assert torch.equal(x, y)
    assert not torch.equal(a(ids)[0], c(ids)[0])


def test_heads_equal_at_init_and_shapes():
    model = small()
    ids = torch.randint(0, 15, (2, 9), generator=torch.Generator().manual_seed(1))
    cur, nxt = model(ids)
    assert cur.shape == nxt.shape == (2, 9, 15)
    assert torch.equal(cur, nxt)
    assert model.token_head.weight.data_ptr() != model.insert_head.weight.data_ptr()  # a copy, not shared


def test_bidirectional_and_attention_mask():
    model = small()
    ids = torch.randint(0, 15, (1, 10), generator=torch.Generator().manual_seed(2))
    later = ids.clone()
    later[0, -1] = (later[0, -1] + 1) % 15
    with torch.no_grad():
        assert not torch.allclose(model(ids)[0][0, 0], model(later)[0][0, 0])  # a later token changes position 0
        mask = torch.ones_like(ids)
        mask[0, -1] = 0  # hidden: changing it no longer matters
        assert torch.allclose(model(ids, mask)[0][0, :-1], model(later, mask)[0][0, :-1], atol=1e-6)


def test_every_token_embedding_is_trainable():
    model = TwoHeadMLM(vocab_size=7, n_layer=1, n_embd=16, n_head=2, max_len=8, seed=0)
    ids = torch.tensor([[0, 1, 2, 0, 6]])
    cur, nxt = model(ids)
    (cur.sum() + nxt.sum()).backward()
    grad = model.encoder.embeddings.word_embeddings.weight.grad
    assert grad[0].abs().sum() > 0  # id 0 is a real token (a digit in me_dlm), not frozen padding


def test_each_head_gets_the_gradient_of_its_own_loss_only():
    """A loss on the insertion logits trains the insertion head and not the token head, and the reverse; one SGD
    step on the insertion loss lowers it and leaves the token head's logits unchanged."""
    model = small(3)
    ids = torch.randint(0, 15, (2, 6), generator=torch.Generator().manual_seed(4))
    target = torch.randint(0, 15, (2, 6), generator=torch.Generator().manual_seed(5))

    def loss_of(logits):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 15), target.reshape(-1))

    cur, nxt = model(ids)
    g_ins = torch.autograd.grad(loss_of(nxt), [model.insert_head.weight, model.token_head.weight], allow_unused=True)
    g_tok = torch.autograd.grad(loss_of(cur), [model.token_head.weight, model.insert_head.weight], allow_unused=True)
    for own, other in (g_ins, g_tok):
        assert own is not None and own.abs().sum() > 0
        assert other is None or other.abs().sum() == 0
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = float(loss_of(nxt).detach())
    opt.zero_grad()
    loss_of(model(ids)[1]).backward()
    opt.step()
    with torch.no_grad():
        assert float(loss_of(model(ids)[1])) < before
        assert torch.allclose(model.token_head.weight, small(3).token_head.weight)
