"""A tiny causal language model (a GPT-2 configuration from ``transformers``, random init) and the
parts chapters need around it: training on answer tokens, log-probabilities, sampling with a
key-value cache, and beam search.

Contents:

* :func:`tiny_gpt` builds the model; nothing is downloaded, the weights are drawn from ``seed``.
* :func:`train_lm` minimises the cross-entropy of the tokens a mask selects (the answer, not the
  prompt) with AdamW and a cosine learning-rate schedule, on batches a callback draws.
* :func:`token_logprobs` and :func:`sequence_logprob` give log p(token | prefix), per token and
  summed over a mask; with gradients on, the sum is the policy-gradient term of RL chapters.
* :func:`sample` draws completions of equal-length prompts (temperature 0 is greedy decoding);
  :func:`completion_mask` marks each completion's tokens up to and including its end token.
* :func:`beam_search` is ``transformers``' beam search with no length penalty: the completion with
  the highest summed log-probability among those the beams reach.

Conventions. Token ids are ``int64`` tensors. Prompts passed to :func:`sample` and
:func:`beam_search` have equal lengths (callers group prompts by length), so no left padding or
attention masks are needed. Completions are padded with ``pad_id`` after the end token. Determinism:
the initial weights come from ``torch.manual_seed(seed)`` in a forked RNG state, and sampling uses
the ``torch.Generator`` the caller passes, so the global RNGs are neither used nor changed.

Devices. Every function works on the device of the model it is given (``model.to(device)``): batches
are moved there and outputs stay there. The caller's generator may live on the CPU while the model is
on a GPU: tokens are then drawn on the CPU, so a seed means the same draws on either device.
"""

from __future__ import annotations

import inspect
import math
import warnings

import numpy as np
import torch
from torch.nn import functional as F

with warnings.catch_warnings():  # tqdm's "IProgress not found" when transformers loads in a notebook
    warnings.simplefilter("ignore")
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

__all__ = [
    "tiny_gpt", "train_lm", "token_logprobs", "sequence_logprob", "sample", "completion_mask", "beam_search",
]

# transformers renamed the key-value cache argument (``past_key_values`` -> ``cache``); use the name
# the installed version has, so that older releases (e.g. Colab's) work too.
_CACHE_ARG = "cache" if "cache" in inspect.signature(GPT2LMHeadModel.forward).parameters else "past_key_values"
_ROWS_PER_CHUNK = 4096


def tiny_gpt(vocab_size: int, *, n_layer: int = 2, n_embd: int = 64, n_head: int = 4, n_positions: int = 32,
             pad_id: int = 0, eos_id: int = 1, seed: int = 0) -> GPT2LMHeadModel:
    """A GPT-2 decoder with learned absolute positions, no dropout and random weights drawn from
    ``seed`` (about ``12 n_layer n_embd^2`` parameters besides the embeddings)."""
    hf_logging.set_verbosity_error()
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = pad_id
    model.generation_config.eos_token_id = eos_id
    return model.eval()


def train_lm(model, draw_batch, *, steps: int, lr: float = 3e-3, weight_decay: float = 0.01,
             warmup: int = 50, seed: int = 0, progress=None) -> np.ndarray:
    """Minimise the mean cross-entropy of the masked tokens over ``steps`` AdamW steps.

    ``draw_batch(rng)`` returns ``(ids, target_mask)``: token ids ``(B, T)`` and a boolean mask
    ``(B, T)`` of the positions whose token is predicted from the tokens before it (an answer and its
    end token). ``rng`` is a ``numpy`` Generator seeded with ``seed``. The learning rate warms up
    linearly for ``warmup`` steps, then follows a cosine to zero. Returns the loss of every step.
    """
    rng = np.random.default_rng(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: _warmup_cosine(s, steps, warmup))
    model.train()
    losses = np.empty(steps)
    for step in (progress(range(steps)) if progress else range(steps)):
        ids, target_mask = (torch.as_tensor(a, device=_device_of(model)) for a in draw_batch(rng))
        logits = model(ids[:, :-1]).logits
        loss = F.cross_entropy(logits[target_mask[:, 1:]], ids[:, 1:][target_mask[:, 1:]])
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        losses[step] = loss.item()
    model.eval()
    return losses


def _warmup_cosine(step: int, steps: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def _device_of(model) -> torch.device:
    return next(model.parameters()).device


def token_logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[:, t] | ids[:, :t]) for t = 1..T-1, shape ``(B, T-1)``; differentiable."""
    logits = model(ids[:, :-1]).logits
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def sequence_logprob(model, ids: torch.Tensor, target_mask: torch.Tensor) -> torch.Tensor:
    """Sum of log p(token | prefix) over the positions ``target_mask`` marks, shape ``(B,)``.

    The log-likelihood of a completion given its prompt; with gradients enabled it is the
    log pi(y | x) of a policy-gradient loss. Position 0 cannot be a target (nothing precedes it).
    """
    return (token_logprobs(model, ids) * target_mask[:, 1:]).sum(dim=1)


@torch.no_grad()
def sample(model, prompts: torch.Tensor, max_new_tokens: int, *, eos_id: int, pad_id: int,
           temperature: float = 1.0, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Complete each prompt (equal lengths, ``(B, P)``) token by token with a key-value cache.

    Each token is drawn from softmax(logits / temperature); ``temperature=0`` takes the argmax
    (greedy decoding). A completion stops at ``eos_id``; later positions hold ``pad_id``. Returns
    the completions ``(B, max_new_tokens)`` and their log-probabilities under the model itself
    (temperature 1), summed up to and including the end token, ``(B,)``.
    """
    parts = [_sample_chunk(model, chunk, max_new_tokens, eos_id, pad_id, temperature, generator)
             for chunk in prompts.split(_ROWS_PER_CHUNK)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _sample_chunk(model, prompts, max_new_tokens, eos_id, pad_id, temperature, generator):
    rows, where = prompts.shape[0], prompts.device
    out = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=where)
    logprob = torch.zeros(rows, device=where)
    done = torch.zeros(rows, dtype=torch.bool, device=where)
    logits, cache = _forward_with_cache(model, prompts, None)
    for t in range(max_new_tokens):
        logp = torch.log_softmax(logits.float(), dim=-1)
        if temperature == 0:
            token = logp.argmax(-1)
        else:
            token = _draw(torch.softmax(logp / temperature, -1), generator)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        logprob += torch.where(done, 0.0, logp.gather(1, token[:, None]).squeeze(1))
        out[:, t] = token
        done |= token == eos_id
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        logits, cache = _forward_with_cache(model, token[:, None], cache)
    return out, logprob


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs``, drawn with ``generator`` on the generator's own device."""
    if generator is None or generator.device == probs.device:
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return torch.multinomial(probs.to(generator.device), 1, generator=generator).squeeze(1).to(probs.device)


def _forward_with_cache(model, ids, cache):
    """Next-token logits after ``ids`` (given the cached keys and values) and the updated cache."""
    output = model(ids, use_cache=True, **{_CACHE_ARG: cache})
    return output.logits[:, -1], getattr(output, _CACHE_ARG)


def completion_mask(completions: torch.Tensor, eos_id: int) -> torch.Tensor:
    """True on each completion's tokens up to and including its first ``eos_id`` (all tokens if it
    has none)."""
    is_eos = completions == eos_id
    ended_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()
    return ended_before == 0


@torch.no_grad()
def beam_search(model, prompts: torch.Tensor, max_new_tokens: int, *, num_beams: int, eos_id: int,
                pad_id: int) -> torch.Tensor:
    """The best completion of each prompt (equal lengths) under beam search with ``num_beams`` beams,
    ranked by summed log-probability with no length penalty (``transformers``' ``generate``).
    Returns ``(B, max_new_tokens)`` padded with ``pad_id``."""
    chunks = []
    for chunk in prompts.split(_ROWS_PER_CHUNK // max(1, num_beams)):
        generated = model.generate(
            chunk, attention_mask=torch.ones_like(chunk), do_sample=False, num_beams=num_beams,
            num_return_sequences=1, max_new_tokens=max_new_tokens, length_penalty=0.0, early_stopping="never",
            eos_token_id=eos_id, pad_token_id=pad_id,
        )[:, chunk.shape[1]:]
        padded = torch.full((chunk.shape[0], max_new_tokens), pad_id, dtype=torch.long, device=chunk.device)
        padded[:, : generated.shape[1]] = generated
        chunks.append(padded)
    return torch.cat(chunks)
