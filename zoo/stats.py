"""Per-head statistics of attention maps: what kind of pattern each head has.

All functions take attention as a numpy array (n_layer, n_head, T_q, T_k) of rows that sum to 1
and average over query rows. Natural logarithms throughout: entropies are in nats, at most ln T_k
(uniform attention) and 0 for a head that looks at a single key.
"""

from __future__ import annotations

import numpy as np


def row_entropy(p):
    """Entropy in nats of each distribution along the last axis, with 0 ln 0 = 0: (..., T) -> (...)."""
    logp = np.log(p, out=np.zeros_like(p), where=p > 0)
    return -(p * logp).sum(-1)


def entropy(attn):
    """Mean row entropy per head, (L, H)."""
    return row_entropy(np.asarray(attn, dtype=np.float64)).mean(-1)


def diagonal_share(attn, offset=0):
    """Mean weight a query gives the key `offset` positions away (0 = itself, -1 = previous,
    +1 = next), over the queries that have such a key. (L, H)."""
    t_q, t_k = attn.shape[-2:]
    rows = np.arange(t_q)
    cols = rows + offset
    ok = (cols >= 0) & (cols < t_k)
    if not ok.any():
        return np.zeros(attn.shape[:2])
    return attn[..., rows[ok], cols[ok]].mean(-1)


def first_token_share(attn):
    """Mean weight on key 0 (the first token, `<s>` for PhoBERT), (L, H)."""
    return attn[..., 0].mean(-1)


def target_key_share(attn, keys_for_query):
    """Mean total weight a query puts on the keys listed for it, (L, H).

    For the sorter, query i must output the i-th smallest digit: its keys are the input positions
    holding that digit, and a high share means the head fetches the answer directly."""
    mask = np.zeros(attn.shape[-2:], dtype=bool)
    for q, keys in enumerate(keys_for_query):
        mask[q, list(keys)] = True
    return (attn * mask).sum(-1).mean(-1)


def head_table(attn, keys_for_query=None):
    """One row per (layer, head): a dict of every statistic above, rounded for display."""
    attn = np.asarray(attn, dtype=np.float64)
    columns = {"entropy (nats)": entropy(attn), "self": diagonal_share(attn, 0),
               "previous": diagonal_share(attn, -1), "next": diagonal_share(attn, 1),
               "first token": first_token_share(attn)}
    if keys_for_query is not None:
        columns["answer digit"] = target_key_share(attn, keys_for_query)
    n_layer, n_head = attn.shape[:2]
    return [{"layer": layer + 1, "head": head + 1,
             **{k: round(float(v[layer, head]), 4) for k, v in columns.items()}}
            for layer in range(n_layer) for head in range(n_head)]


def sorter_answer_keys(digits):
    """For each output position i of the sorter, the input positions holding sorted(digits)[i]."""
    target = sorted(digits)
    return [[j for j, d in enumerate(digits) if d == t] for t in target]
