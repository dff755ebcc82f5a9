"""Ulysses sequence parallelism: each rank holds 1/P of the tokens, all-to-alls around attention.

DeepSpeed-Ulysses (Jacobs et al., arXiv:2309.14509), applied to the Wan DiT. Everything in a
block except self-attention works token by token (modulation, norms, projections, RoPE,
cross-attention to the full text, FFN), so each of the P ranks of a Ulysses group runs it on
its own ``L_r`` tokens: ``L // P``, the first ``L % P`` ranks one more. Self-attention needs
every token, so around it one all-to-all trades token shards for head groups:

    q, k, v [B, L_r, N, D] --all-to-all--> [B, L, N/P, D] -> attention -> [B, L, N/P, D]
    --all-to-all--> [B, L_r, N, D]

Per block each rank sends and receives ``4 (P-1)/P B L_r N D`` elements (q, k, v and the
output, one all-to-all each): the volume per rank falls as 1/P. The patch
embedding (a stride-2 convolution, 0.01% of the FLOPs) runs on all tokens and its output is
sliced; the output head runs on the shard and one all-gather rebuilds ``[B, L, ...]`` for the
sampler, so latents stay whole and equal on every rank between steps.

Heads must divide by P (``check_heads`` names the degrees that do); tokens need not.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from wanscope.parallel.group import ParallelContext, all_gather_dim0, check_heads
from wanscope.wan import ranges
from wanscope.wan.attention import AttentionBackend, attention

QKV_ALL_TO_ALL = "wanscope/parallel/ulysses_qkv"
OUT_ALL_TO_ALL = "wanscope/parallel/ulysses_out"
GATHER = "wanscope/parallel/ulysses_gather"


def shard_sizes(length: int, degree: int) -> list[int]:
    """Tokens per rank: ``length // degree``, the first ``length % degree`` ranks one more."""
    base, extra = divmod(length, degree)
    return [base + (i < extra) for i in range(degree)]


class Ulysses:
    """The sequence-parallel hooks of one rank, installed into a ``WanDiT`` with ``install``.

    ``shard`` runs first in every forward and records the token split that ``attention`` and
    ``gather`` then use.

    Args:
        ctx: this rank's process group (``ctx.ulysses_degree`` > 1).
        num_heads: the DiT's attention heads.

    Raises:
        UsageError: the Ulysses degree does not divide ``num_heads``.
    """

    def __init__(self, ctx: ParallelContext, num_heads: int):
        check_heads(num_heads, ctx.ulysses_degree, ctx.cfg_degree)
        self.ctx = ctx
        self.degree = ctx.ulysses_degree
        self.index = ctx.ulysses_rank
        self._sizes: list[int] = []

    def install(self, dit: torch.nn.Module) -> None:
        """Shard ``dit``'s tokens and wrap its self-attention calls (cross-attention keeps the
        plain call: its keys are the text tokens every rank has)."""
        dit.sequence_parallel = self
        for block in dit.blocks:
            block.self_attn.attend = self.attention

    def shard(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """This rank's tokens.

        Args:
            x: [B, L, dim] after the patch embedding; rope: cos, sin [L, 1, D/2].

        Returns:
            x [B, L_r, dim] and the RoPE rows of the same positions, [L_r, 1, D/2] each.
        """
        self._sizes = shard_sizes(x.shape[1], self.degree)
        start = sum(self._sizes[: self.index])
        stop = start + self._sizes[self.index]
        cos, sin = rope
        return x[:, start:stop], (cos[start:stop], sin[start:stop])

    def attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: AttentionBackend
    ) -> torch.Tensor:
        """Self-attention over all L tokens with this rank's N/P heads.

        Args:
            q, k, v: [B, L_r, N, D] (RoPE applied), one dtype.

        Returns:
            [B, L_r, N, D] in the dtype of ``q``.

        Raises:
            ParallelError: an all-to-all failed.
        """
        b, n_local_tokens, heads, d = q.shape
        p, sizes = self.degree, self._sizes
        h = heads // p
        group = self.ctx.ulysses_group
        with ranges.named_range(QKV_ALL_TO_ALL):
            # send[i] chunk j (dim 1) goes to rank j: its head group, for this rank's tokens
            send = q.new_empty((3, p, n_local_tokens, b, h, d))
            for i, t in enumerate((q, k, v)):
                send[i].copy_(t.unflatten(2, (p, h)).permute(2, 1, 0, 3, 4))  # [P, L_r, B, N/P, D]
            # one call per tensor, so each lands contiguous [L, B, N/P, D] rather than interleaved
            # with the other two: cuDNN's attention is slower on interleaved rows (wan/fused.py
            # measured 3% for a strided v alone)
            recv = q.new_empty((3, sum(sizes), b, h, d))  # every rank's tokens, in order
            with self.ctx.collective("the Ulysses all-to-all of q, k, v"):
                for i in range(3):
                    dist.all_to_all_single(recv[i], send[i].flatten(0, 1), sizes, [n_local_tokens] * p, group=group)
        q_all, k_all, v_all = (recv[i].transpose(0, 1) for i in range(3))  # [B, L, N/P, D]
        out = attention(q_all, k_all, v_all, backend)  # [B, L, N/P, D]
        with ranges.named_range(OUT_ALL_TO_ALL):
            send = out.transpose(0, 1).contiguous()  # [L, B, N/P, D]
            recv = q.new_empty((p * n_local_tokens, b, h, d))  # from rank j: head group j
            with self.ctx.collective("the Ulysses all-to-all of the attention output"):
                dist.all_to_all_single(recv, send, [n_local_tokens] * p, sizes, group=group)
        return recv.unflatten(0, (p, n_local_tokens)).permute(2, 1, 0, 3, 4).reshape(b, n_local_tokens, heads, d)

    def gather(self, out: torch.Tensor) -> torch.Tensor:
        """Every rank's rows of the output head, in token order.

        Args:
            out: [B, L_r, E] (E = patch volume x output channels).

        Returns:
            [B, L, E], contiguous, equal on every rank.

        Raises:
            ParallelError: the all-gather failed.
        """
        sizes, longest = self._sizes, max(self._sizes)
        b, n, e = out.shape
        padded = out.new_zeros((longest, b, e))  # shards differ by at most one token
        padded[:n] = out.transpose(0, 1)
        gathered = out.new_empty((self.degree * longest, b, e))
        with ranges.named_range(GATHER), self.ctx.collective("the Ulysses all-gather of the output"):
            all_gather_dim0(gathered, padded, self.ctx.ulysses_group)
        rows = gathered.unflatten(0, (self.degree, longest))
        return torch.cat([rows[j, : sizes[j]] for j in range(self.degree)]).transpose(0, 1).contiguous()


def shard_dit(ctx: ParallelContext, dit: torch.nn.Module) -> None:
    """Install Ulysses into ``dit`` when this run has a Ulysses degree above 1 (else nothing).

    Raises:
        UsageError: the degree does not divide the DiT's heads (``check_heads``).
    """
    if ctx.ulysses_degree > 1:
        Ulysses(ctx, dit.cfg.num_heads).install(dit)
