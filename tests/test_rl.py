"""Unit tests of replib.rl (group advantages, policy-gradient losses, the k3 KL estimator)."""

import math

import numpy as np
import pytest
import torch

from replib import rl


def test_group_advantages_are_standardised_per_group():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(6, 8, generator=g)
    rewards[2] = 0.0
    rewards[4] = 1.0
    rewards[5] = (torch.rand(8, generator=g) < 0.3).float()
    a = rl.group_advantages(rewards)
    assert a.shape == rewards.shape
    assert torch.allclose(a.mean(dim=1), torch.zeros(6), atol=1e-6)
    varied = [0, 1, 3, 5]
    assert torch.allclose(a[varied].std(dim=1, unbiased=False), torch.ones(4), atol=1e-4)
    assert torch.equal(a[2], torch.zeros(8)) and torch.equal(a[4], torch.zeros(8))
    # population std: one success in four -> std sqrt(3)/4
    a = rl.group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), eps=0.0)
    assert torch.allclose(a, torch.tensor([[3.0, -1.0, -1.0, -1.0]]) / math.sqrt(3.0))
    # numpy input works too
    assert torch.allclose(rl.group_advantages(np.array([[0.0, 1.0]])), torch.tensor([[-1.0, 1.0]]), atol=1e-5)


def test_nonzero_advantage_share():
    rewards = torch.tensor([[0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 0, 0]], dtype=torch.float32)
    assert rl.nonzero_advantage_share(rewards) == pytest.approx(0.5)
    assert rl.nonzero_advantage_share(torch.zeros(5, 4)) == 0.0
    assert isinstance(rl.nonzero_advantage_share(rewards), float)


def _logits_and_logprob(seed=0, n=12):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, 5, generator=g, requires_grad=True)
    actions = torch.randint(0, 5, (n,), generator=g)
    logprob = torch.log_softmax(logits, -1).gather(1, actions[:, None]).squeeze(1)
    return logits, logprob, g


def test_policy_gradient_loss_value_and_weights():
    lp = torch.tensor([-1.0, -2.0, -0.5])
    adv = torch.tensor([1.0, -1.0, 2.0])
    assert float(rl.policy_gradient_loss(lp, adv)) == pytest.approx(-(-1.0 + 2.0 - 1.0) / 3)
    w = torch.tensor([1.0, 0.0, 1.0])
    assert float(rl.policy_gradient_loss(lp, adv, w)) == pytest.approx(-(-1.0 - 1.0) / 2)


def test_clipped_surrogate_equals_policy_gradient_at_ratio_one():
    logits, lp, g = _logits_and_logprob()
    adv = torch.randn(12, generator=g)
    pg = rl.policy_gradient_loss(lp, adv)
    (grad_pg,) = torch.autograd.grad(pg, logits, retain_graph=True)
    clipped = rl.clipped_surrogate(lp, lp.detach(), adv, clip_eps=0.2)
    (grad_clip,) = torch.autograd.grad(clipped, logits)
    # same gradient; the values differ (-mean(A) vs -mean(A log pi)): equal only for mean-zero A
    assert clipped.item() == pytest.approx(-adv.mean().item(), abs=1e-6)
    assert torch.allclose(grad_pg, grad_clip, atol=1e-6)
    adv0 = rl.group_advantages(torch.randn(3, 4, generator=g)).reshape(-1)
    assert rl.clipped_surrogate(lp, lp.detach(), adv0).item() == pytest.approx(0.0, abs=1e-6)
    assert grad_pg.abs().sum() > 0


def test_clipping_blocks_the_gradient_outside_the_trust_region():
    new = torch.tensor([0.5, -0.5, 0.5, -0.5, 0.05], requires_grad=True)
    old = torch.zeros(5)
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0])
    loss = rl.clipped_surrogate(new, old, adv, clip_eps=0.2)
    (grad,) = torch.autograd.grad(loss, new)
    # rho = e^0.5 > 1.2 with A > 0 and rho = e^-0.5 < 0.8 with A < 0: clipped, no gradient
    assert grad[0] == 0 and grad[1] == 0
    # the pessimistic side is never clipped; inside the region the gradient is -rho A / n
    assert grad[2] == pytest.approx(math.exp(0.5) / 5, rel=1e-5)
    assert grad[3] == pytest.approx(-math.exp(-0.5) / 5, rel=1e-5)
    assert grad[4] == pytest.approx(-math.exp(0.05) / 5, rel=1e-5)


def test_k3_is_non_negative_and_estimates_kl():
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    q = torch.tensor([0.25, 0.25, 0.25, 0.25])
    g = torch.Generator().manual_seed(3)
    x = torch.multinomial(p, 200_000, replacement=True, generator=g)
    k3 = rl.kl_k3(p.log()[x], q.log()[x])
    assert bool((k3 >= 0).all())
    kl = float((p * (p / q).log()).sum())
    assert float(k3.mean()) == pytest.approx(kl, rel=0.03)
    assert torch.equal(rl.kl_k3(torch.tensor([-1.3]), torch.tensor([-1.3])), torch.zeros(1))


# ---- update direction: what one gradient step on each loss does ---------------------------------


def test_policy_gradient_sgd_step_is_minus_lr_times_the_hand_gradient():
    """One plain-SGD step on policy_gradient_loss moves the logits by -lr x grad of -mean(A log pi),
    written out by hand (one-hot minus softmax, scaled by A / n): the positive-advantage action's
    probability rises, the negative one's falls."""
    logits = torch.tensor([[0.2, -0.1, 0.3], [0.0, 0.5, -0.4], [0.1, 0.1, 0.1]], dtype=torch.float64,
                          requires_grad=True)
    actions = torch.tensor([0, 1, 2])
    adv = torch.tensor([1.5, -0.5, 0.0], dtype=torch.float64)
    before = torch.softmax(logits.detach(), -1)
    opt = torch.optim.SGD([logits], lr=0.1)
    lp = torch.log_softmax(logits, -1)[torch.arange(3), actions]
    rl.policy_gradient_loss(lp, adv).backward()
    opt.step()
    # d(-mean(A log pi_a)) / d logits = -(A / n) (onehot(a) - softmax)
    grad = -(adv[:, None] / 3) * (torch.nn.functional.one_hot(actions, 3).double() - before)
    after = torch.softmax(logits.detach(), -1)
    expected = torch.softmax(torch.tensor([[0.2, -0.1, 0.3], [0.0, 0.5, -0.4], [0.1, 0.1, 0.1]],
                                          dtype=torch.float64) - 0.1 * grad, -1)
    assert torch.allclose(after, expected, atol=1e-12)
    assert after[0, 0] > before[0, 0] and after[1, 1] < before[1, 1]
    assert torch.allclose(after[2], before[2])  # A = 0: untouched


def test_weighted_losses_are_weighted_means_not_sums():
    """Weights make every mean sum(w x) / sum(w) in both losses (value and gradient), so scaling
    all weights changes nothing and a zero weight removes a sample."""
    new = torch.tensor([0.1, -0.05, 0.02, 0.3], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(4, dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    w = torch.tensor([2.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    loss = rl.clipped_surrogate(new, old, adv, clip_eps=0.2, weights=w)
    rho = torch.exp(new.detach())  # all inside the trust region
    assert loss.item() == pytest.approx(float(-(w * rho * adv).sum() / w.sum()), rel=1e-12)
    (grad,) = torch.autograd.grad(loss, new)
    assert torch.allclose(grad, -w * rho * adv / w.sum())
    scaled = rl.clipped_surrogate(new, old, adv, clip_eps=0.2, weights=10 * w)
    assert scaled.item() == pytest.approx(loss.item(), rel=1e-12)
    pg = rl.policy_gradient_loss(new, adv, weights=10 * w)
    assert pg.item() == pytest.approx(float(-(w * adv * new.detach()).sum() / w.sum()), rel=1e-12)


def test_kl_k3_gradient_pulls_the_policy_towards_the_reference():
    """d k3 / d l_new = 1 - exp(l_ref - l_new): positive where the policy is above the reference,
    negative below, zero at equality; a gradient step on mean k3 brings l_new towards l_ref."""
    new = torch.tensor([-0.5, -2.0, -1.0], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-1.0, -1.5, -1.0], dtype=torch.float64)
    k3 = rl.kl_k3(new, ref)
    (grad,) = torch.autograd.grad(k3.sum(), new)
    assert torch.allclose(grad, 1 - torch.exp(ref - new.detach()))
    assert grad[0] > 0 and grad[1] < 0 and grad[2] == 0
    moved = new.detach() - 0.1 * grad
    assert torch.all((moved - ref).abs()[:2] < (new.detach() - ref).abs()[:2])
    assert torch.allclose(k3, torch.exp(ref - new.detach()) - (ref - new.detach()) - 1)


def test_clipped_surrogate_uses_the_old_logprob_in_the_ratio():
    """At a second epoch the new and old log-probabilities differ: the value is -mean(rho A) with
    rho = exp(new - old) and the old values carry no gradient, even if they require grad."""
    new = torch.tensor([-1.0, -0.8], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([-1.1, -0.7], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([1.0, 1.0], dtype=torch.float64)
    loss = rl.clipped_surrogate(new, old, adv, clip_eps=0.2)
    rho = torch.exp(new.detach() - old.detach())
    assert loss.item() == pytest.approx(float(-(rho * adv).mean()), rel=1e-12)
    assert not torch.allclose(rho, torch.ones(2, dtype=torch.float64))
    g_new, g_old = torch.autograd.grad(loss, [new, old], allow_unused=True)
    assert torch.allclose(g_new, -rho * adv / 2)
    assert g_old is None or torch.all(g_old == 0)
