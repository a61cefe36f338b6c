"""A mixture-of-experts feed-forward (Shazeer et al. 2017; Switch Transformer, Fedus et al. 2022;
Mixtral, Jiang et al. 2024).

Instead of one feed-forward network, ``num_experts`` of them; a linear *router* scores the experts
for each token and only the ``top_k`` best run on it, their outputs mixed by the renormalised
router probabilities. Parameters grow with the number of experts, compute per token only with
``top_k``. Left alone, the router tends to send most tokens to a few experts; the
*load-balancing loss* (Fedus et al. 2022, in Mixtral's top-k form)

    aux = E · Σ_e f_e · P_e,

with ``f_e`` the fraction of tokens whose top-k includes expert e and ``P_e`` the mean router
probability of e, is smallest (= top_k) when both are uniform, and pushes towards that.
"""

from __future__ import annotations

import torch
from torch import nn

from .feedforward import FeedForward


def load_balancing_loss(router_probs: torch.Tensor, top_idx: torch.Tensor, num_experts: int) -> torch.Tensor:
    """``E · Σ_e f_e · P_e`` from router probabilities ``(N, E)`` and chosen experts ``(N, k)``.

    ``f_e`` (a count, no gradient) is the fraction of the N tokens that sent a copy to expert e;
    ``P_e`` (differentiable) is the mean probability the router gave e. Equals ``k`` when routing
    is perfectly uniform and grows to ``k · E`` when one expert takes everything.
    """
    chosen = torch.zeros_like(router_probs).scatter_(1, top_idx, 1.0)  # (N, E) 1 where routed
    f = chosen.mean(0)  # (E,), sums to k
    p = router_probs.mean(0)  # (E,), sums to 1
    return num_experts * (f * p).sum()


class MoEFeedForward(nn.Module):
    """``Σ_{e in top-k(x)} g_e(x) · expert_e(x)``, with ``g = softmax(router(x))`` renormalised over
    the top-k. Input/output ``(B, T, d_model)``; each expert is a :class:`FeedForward`.

    After every forward, ``aux_loss`` holds the load-balancing loss of that batch and
    ``expert_counts`` how many tokens each expert processed ``(E,)``.
    """

    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int = 2,
                 activation: str = "swiglu", dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 2:
            raise ValueError(f"num_experts={num_experts!r} must be an integer >= 2")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k={top_k!r} must be an integer in [1, num_experts={num_experts}]")
        self.num_experts, self.top_k = num_experts, top_k
        self.router = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(d_model, d_ff, activation=activation, dropout=dropout,
                                                 bias=bias) for _ in range(num_experts))
        self.aux_loss = torch.zeros(())
        self.expert_counts = torch.zeros(num_experts, dtype=torch.long)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, C): routing is per token
        probs = torch.softmax(self.router(x).float(), dim=-1)  # (N, E)
        top_p, top_idx = probs.topk(self.top_k, dim=-1)  # (N, k)
        gates = (top_p / top_p.sum(-1, keepdim=True)).to(x.dtype)  # renormalised over the chosen k
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = (top_idx == e).nonzero(as_tuple=True)  # the tokens routed to expert e
            if token.numel():
                out.index_add_(0, token, gates[token, slot, None] * expert(x[token]))
        self.aux_loss = load_balancing_loss(probs, top_idx, self.num_experts)
        self.expert_counts = torch.bincount(top_idx.flatten(), minlength=self.num_experts)
        return out.view(shape)
