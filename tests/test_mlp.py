"""Unit tests of replib.models.mlp's training loop: each step is SGD (momentum, weight decay, OneCycle learning
rate) on the cross-entropy of its own minibatch, pinned against hand-written updates."""

import numpy as np
import pytest
import torch

from replib.models import mlp

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.2, -0.3], [-0.7, 0.9, 0.4], [0.1, 0.1, -1.2], [2.0, -0.5, 0.0],
              [-1.1, -0.4, 0.8]], dtype=np.float32)
Y = np.array([0, 2, 1, 1, 0, 2])


def _hand_ce(model, rows, smoothing=0.0):
    """(1 - eps) mean_i -log p(y_i | x_i) + eps mean_i mean_c -log p(c | x_i), written out."""
    logp = torch.log_softmax(model(torch.as_tensor(X[rows])), -1)
    nll = -logp[torch.arange(len(rows)), torch.as_tensor(Y[rows])].mean()
    return (1 - smoothing) * nll + smoothing * (-logp.mean(-1)).mean()


def _one_cycle_lrs(lr, total):
    """The learning rate of each step under torch's OneCycleLR (peak ``lr``, default warm-up and annealing)."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total, cycle_momentum=False)
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_first_step_is_plain_sgd_down_the_cross_entropy():
    """Step 1 on the whole batch: p <- p - lr_0 g (lr_0 OneCycleLR's first rate over max(steps, 2) = 2 steps; the
    first momentum buffer is g itself), g the gradient of the hand-written mean cross-entropy."""
    model, ref = mlp.MLP([3, 4, 3], seed=1), mlp.MLP([3, 4, 3], seed=1)
    want = _hand_ce(ref, np.arange(6))
    grads = torch.autograd.grad(want, list(ref.parameters()))
    lr0 = _one_cycle_lrs(0.5, 2)[0]
    info = mlp.train_classifier(model, X, Y, steps=1, batch_size=6, lr=0.5, momentum=0.9, weight_decay=0.0)
    assert info["steps"] == 1 and info["final_loss"] == pytest.approx(float(want.detach()), rel=1e-5)
    for p, p0, g in zip(model.parameters(), ref.parameters(), grads):
        assert torch.allclose(p.detach(), p0.detach() - lr0 * g, atol=1e-6)
    assert float(_hand_ce(model, np.arange(6)).detach()) < float(want.detach())


def test_label_smoothing_loss_is_the_weighted_sum_of_its_parts():
    """With label smoothing eps the loss of a step is (1 - eps) NLL + eps (mean over classes of -log p)."""
    model = mlp.MLP([3, 4, 3], seed=2)
    with torch.no_grad():
        model.layers[-1].weight.mul_(10)  # confident predictions: NLL and the uniform term differ
        logp = torch.log_softmax(model(torch.as_tensor(X)), -1)
    nll = float(-logp[torch.arange(6), torch.as_tensor(Y)].mean())
    uniform = float(-logp.mean())
    info = mlp.train_classifier(model, X, Y, steps=1, batch_size=6, lr=0.1, label_smoothing=0.3)
    assert info["final_loss"] == pytest.approx(0.7 * nll + 0.3 * uniform, rel=1e-5)
    assert abs(nll - uniform) > 0.05  # the smoothing term changes the total


def test_four_steps_carry_momentum_decay_and_the_one_cycle_schedule_over_fresh_minibatches():
    """Two epochs of two minibatches (one randperm per epoch from a generator seeded with ``seed``): steps 2-4
    use buf <- mu buf + (g + wd p), p <- p - lr_k buf with lr_k from OneCycleLR, on a different minibatch each."""
    model, ref = mlp.MLP([3, 4, 3], seed=3), mlp.MLP([3, 4, 3], seed=3)
    mlp.train_classifier(model, X, Y, steps=4, batch_size=3, lr=0.4, momentum=0.9, weight_decay=0.05, seed=7)
    gen = torch.Generator().manual_seed(7)
    perms = [torch.randperm(6, generator=gen), torch.randperm(6, generator=gen)]
    batches = [perms[0][:3], perms[0][3:], perms[1][:3], perms[1][3:]]
    assert not torch.equal(batches[0].sort().values, batches[1].sort().values)
    params, bufs = list(ref.parameters()), None
    for lr, rows in zip(_one_cycle_lrs(0.4, 4), batches):
        grads = torch.autograd.grad(_hand_ce(ref, rows.numpy()), params)
        steps = [g + 0.05 * p.detach() for g, p in zip(grads, params)]
        bufs = steps if bufs is None else [0.9 * b + d for b, d in zip(bufs, steps)]
        with torch.no_grad():
            for p, b in zip(params, bufs):
                p.sub_(lr * b)
    for p, q in zip(model.parameters(), params):
        assert torch.allclose(p.detach(), q.detach(), atol=1e-6)
