"""Ulysses sequence parallelism: each rank holds 1/P of the tokens, all-to-alls around attention.

DeepSpeed-Ulysses (Jacobs et al., arXiv:2309.14509), applied to the Wan DiT. Everything in a
block except self-attention works token by token (modulation, norms, projections, RoPE,
cross-attention to the full text, FFN), so each of the P ranks of a Ulysses group runs it on
its own ``L_r`` tokens: ``L // P``, the first ``L % P`` ranks one more. Self-attention needs
every token, so around it one all-to-all trades token shards for head groups:

    q, k, v [B, L_r, N, D] --all-to-all--> [B, L, N/P, D] -> attention -> [B, L, N/P, D]
    --all-to-all--> [B, L_r, N, D]

Per block each rank sends and receives ``4 (P-1)/P B L_r N D`` elements (q, k, v and the
output): the volume per rank falls as 1/P. The patch
embedding (a stride-2 convolution, 0.01% of the FLOPs) runs on all tokens and its output is
sliced; the output head runs on the shard and one all-gather rebuilds ``[B, L, ...]`` for the
sampler, so latents stay whole and equal on every rank between steps.

The all-to-alls are pipelined with attention by head group. Attention is independent per
head, so each rank's N/P heads are split into G groups (``head_groups``, default
``DEFAULT_ULYSSES_HEAD_GROUPS``): the q, k, v of every group are sent first (asynchronous
collectives, on the communicator's own stream), then group g's attention runs while group
g+1's inputs and group g-1's output travel. Exposed are only the first group's inputs and the
last group's output: about 1/G of the transfers, against all of them with G = 1. What cannot
overlap: the output projection needs every head of a token, so it waits for the last group;
q, k and v arrive here already normalized and rotated, so their transfers cannot hide behind
the projections (that would need the hook around the whole self-attention, not around the
attention call). Each head's attention is the same computation whatever its group, so the
result does not depend on G. Under NCCL the Ulysses communicator runs on a high-priority
stream (``group.py``): its kernels then get the SMs that attention's blocks free, instead of
waiting for attention's last wave.

Heads must divide by P (``check_heads`` names the degrees that do); tokens need not.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from wanscope.parallel.group import ParallelContext, all_gather_dim0
from wanscope.parallel.plan import (
    DEFAULT_ULYSSES_HEAD_GROUPS,
    check_heads,
    head_group_sizes,
)
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
        head_groups: how the N/P heads of a rank are pipelined (``plan.head_group_sizes``): a
            count, or the group sizes.

    Raises:
        UsageError: the Ulysses degree does not divide ``num_heads``, or bad ``head_groups``.
    """

    def __init__(self, ctx: ParallelContext, num_heads: int,
                 head_groups: int | tuple[int, ...] = DEFAULT_ULYSSES_HEAD_GROUPS):
        check_heads(num_heads, ctx.ulysses_degree, ctx.cfg_degree)
        self.ctx = ctx
        self.degree = ctx.ulysses_degree
        self.index = ctx.ulysses_rank
        self.group_sizes = head_group_sizes(num_heads // self.degree, head_groups)
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
        """Self-attention over all L tokens with this rank's N/P heads, group by group.

        Args:
            q, k, v: [B, L_r, N, D] (RoPE applied), one dtype.

        Returns:
            [B, L_r, N, D] in the dtype of ``q``.

        Raises:
            ParallelError: an all-to-all failed.
        """
        b, n_local, heads, d = q.shape
        p, sizes, group = self.degree, self._sizes, self.ctx.ulysses_group
        h, length = heads // p, sum(sizes)
        firsts = [sum(self.group_sizes[:g]) for g in range(len(self.group_sizes))]
        inputs = []  # per head group: the received q, k, v [3, L, B, hg, D] and the pending transfers
        with ranges.named_range(QKV_ALL_TO_ALL), self.ctx.collective("the Ulysses all-to-all of q, k, v"):
            for first, hg in zip(firsts, self.group_sizes):
                recv = q.new_empty((3, length, b, hg, d))  # every rank's tokens, in order
                works = []
                for i, t in enumerate((q, k, v)):
                    # chunk j (dim 0) goes to rank j: heads j*h+first.. of its head block, this rank's tokens
                    send = t.unflatten(2, (p, h))[:, :, :, first : first + hg].permute(2, 1, 0, 3, 4).contiguous()
                    # one call per tensor, so each lands contiguous [L, B, hg, D] rather than
                    # interleaved with the other two: cuDNN's attention is slower on interleaved
                    # rows (wan/fused.py measured 3% for a strided v alone)
                    works.append(dist.all_to_all_single(recv[i], send.flatten(0, 1), sizes, [n_local] * p,
                                                        group=group, async_op=True))  # send: [P, L_r, B, hg, D]
                inputs.append((recv, works))
        out = q.new_empty((b, n_local, p, h, d))  # [B, L_r, N, D] with the heads split by rank
        pending: list = []  # (first head, output transfer) of the group whose output travels
        for first, hg, (recv, works) in zip(firsts, self.group_sizes, inputs):
            with self.ctx.collective("the Ulysses all-to-all of q, k, v"):
                for work in works:
                    work.wait()  # the compute stream waits for the transfer; the host does not (NCCL)
            o = attention(*(recv[i].transpose(0, 1) for i in range(3)), backend)  # [B, L, hg, D]
            with ranges.named_range(OUT_ALL_TO_ALL), \
                    self.ctx.collective("the Ulysses all-to-all of the attention output"):
                back = q.new_empty((p * n_local, b, hg, d))  # from rank j: its rows of head group j
                work = dist.all_to_all_single(back, o.transpose(0, 1).contiguous(), [n_local] * p, sizes,
                                              group=group, async_op=True)
                # unpack the previous group now: its output crossed while this group's attention ran
                self._unpack(out, pending)
                pending = [(first, back, work)]
        with self.ctx.collective("the Ulysses all-to-all of the attention output"):
            self._unpack(out, pending)
        return out.flatten(2, 3)  # [B, L_r, N, D]

    def _unpack(self, out: torch.Tensor, pending: list) -> None:
        """Wait for each output transfer in ``pending`` and copy it into its heads of ``out``
        [B, L_r, P, N/P, D] (received as [P * L_r, B, hg, D], rank j's rows first)."""
        n_local, p = out.shape[1:3]
        for first, back, work in pending:
            work.wait()
            hg = back.shape[2]
            out[:, :, :, first : first + hg].copy_(back.unflatten(0, (p, n_local)).permute(2, 1, 0, 3, 4))

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


def shard_dit(ctx: ParallelContext, dit: torch.nn.Module,
              head_groups: int | tuple[int, ...] = DEFAULT_ULYSSES_HEAD_GROUPS) -> None:
    """Install Ulysses into ``dit`` when this run has a Ulysses degree above 1 (else nothing).

    Raises:
        UsageError: the degree does not divide the DiT's heads (``check_heads``), or bad
            ``head_groups`` (``plan.head_group_sizes``).
    """
    if ctx.ulysses_degree > 1:
        Ulysses(ctx, dit.cfg.num_heads, head_groups).install(dit)
