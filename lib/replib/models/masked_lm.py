"""A tiny bidirectional transformer with two output heads, for masked-diffusion and edit chapters.

Contents:

* :class:`TwoHeadMLM` -- a BERT encoder from ``transformers`` (random init, nothing downloaded)
  with two linear heads on the last hidden state h_i:

  - the *token head* p_cur(. | i): the usual masked-LM head (which token belongs at position i);
  - the *insertion* ("next-token") head p_nxt(. | i): which token belongs right after position i.
    It is initialised as an exact copy of the token head (as in the ME-DLM release).

  ``forward(ids, attention_mask=None)`` returns ``(cur_logits, nxt_logits)``, both ``(B, T, V)``.

Conventions. Attention is bidirectional (no causal mask); positions are learned absolute positions
(``max_len`` of them); dropout is 0; token types are not used (all zero, one type). The optional
``attention_mask`` (``(B, T)``, 1 = attend, 0 = padding) lets batches of different lengths share a
tensor; without it every position attends to every position. There is no time embedding (the
noise level is read from the number of mask tokens, as in LLaDA). Determinism: the initial weights
come from ``torch.manual_seed(seed)`` inside a forked RNG state, so the global RNGs are neither used
nor changed.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

with warnings.catch_warnings():  # tqdm's "IProgress not found" when transformers loads in a notebook
    warnings.simplefilter("ignore")
    from transformers import BertConfig, BertModel
    from transformers.utils import logging as hf_logging

__all__ = ["TwoHeadMLM"]


class TwoHeadMLM(nn.Module):
    """Bidirectional encoder + token head + insertion head (initialised as a copy of the token head).

    About ``12 n_layer n_embd^2`` parameters in the encoder, plus embeddings and the two heads."""

    def __init__(self, vocab_size: int, n_layer: int = 2, n_embd: int = 64, n_head: int = 4,
                 max_len: int = 32, seed: int = 0):
        super().__init__()
        hf_logging.set_verbosity_error()
        config = BertConfig(
            vocab_size=vocab_size, hidden_size=n_embd, num_hidden_layers=n_layer, num_attention_heads=n_head,
            intermediate_size=4 * n_embd, max_position_embeddings=max_len, type_vocab_size=1,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=None,  # every id trainable
            position_embedding_type="absolute",
        )
        self.vocab_size, self.max_len = vocab_size, max_len
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.encoder = BertModel(config, add_pooling_layer=False)
            self.token_head = nn.Linear(n_embd, vocab_size)
            self.insert_head = nn.Linear(n_embd, vocab_size)
            self.insert_head.load_state_dict(self.token_head.state_dict())
        self.eval()

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        """``(cur_logits, nxt_logits)``, each ``(B, T, V)``, for token ids ``(B, T)``."""
        if attention_mask is None:
            attention_mask = torch.ones_like(ids)
        hidden = self.encoder(input_ids=ids, attention_mask=attention_mask,
                              token_type_ids=torch.zeros_like(ids)).last_hidden_state
        return self.token_head(hidden), self.insert_head(hidden)
