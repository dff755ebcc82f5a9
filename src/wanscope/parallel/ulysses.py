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
``DEFAULT_ULYSSES_HEAD_GROUPS`` of the transport): the q, k, v of every group are sent first
(asynchronously, on the transport's own stream), then group g's attention runs while group
g+1's inputs and group g-1's output travel. On the torch-op path Ulysses runs the whole
self-attention (``self_attention``), v first, then k, then q, each sent as soon as it is
made: v's and k's transfers travel while the next tensor is projected, normalized and
rotated. Exposed are the first group's q (on the fused path, which hands over finished q, k
and v: the first group's three) and the last group's output: the output projection needs
every head of a token, so it waits for the last group. Each head's attention is the
same computation whatever its group, so the result does not depend on G. Under NCCL the
Ulysses communicator runs on a high-priority stream (``group.py``): its kernels then get the
SMs that attention's blocks free, instead of waiting for attention's last wave.

Layout copies. Attention reads each group's received q, k, v ([L, B, hg, D], every token)
as [B, hg, L, D] strided views; cuDNN takes strides and writes its output in q's layout, so
neither side of the attention call copies. Where q, k, v and the output live between the
projections and the transfers is the transport's (``exchange.py``), per block and forward,
with E = B L_r N D elements of s bytes each (E = 16,380 x 1,536 at 1.3B 832x480x81 on 2
ranks):

- ``nccl``: an all-to-all sends contiguous chunks, so q and k are stored in send order
  by RoPE's rounding from fp32 to the model dtype (the pass that rounded them anyway, made
  strided), v by one GEMM per head group and rank writing its chunk, and the received
  output is copied into token order for the output projection (its GEMM needs every head of
  a token in one row): 2 E s of copies (the fused path, whose q, k, v come finished: 8 E s),
  and NCCL's kernels take SMs from the attention they overlap;
- ``copy-engine``: q, k, v and the output stay token-major; strided copies on the copy
  engines pull and push the head slices: no layout copy, no SM spent on moving data (the
  fused path's finished q, k, v are still copied into the workspace: 6 E s).

Heads must divide by P (``check_heads`` names the degrees that do); tokens need not.
"""

from __future__ import annotations

import torch

from wanscope.parallel.exchange import make_transport, peer_access
from wanscope.parallel.group import ParallelContext, all_gather_dim0
from wanscope.parallel.plan import (
    DEFAULT_ULYSSES_HEAD_GROUPS,
    check_heads,
    head_group_sizes,
    ulysses_transport,
)
from wanscope.wan import ranges
from wanscope.wan.attention import AttentionBackend, attention
from wanscope.wan.dit import apply_rope_fp32

QKV_ALL_TO_ALL = "wanscope/parallel/ulysses_qkv"
OUT_ALL_TO_ALL = "wanscope/parallel/ulysses_out"
GATHER = "wanscope/parallel/ulysses_gather"
_Q, _K, _V = range(3)  # tensor index in the send and receive buffers


def shard_sizes(length: int, degree: int) -> list[int]:
    """Tokens per rank: ``length // degree``, the first ``length % degree`` ranks one more."""
    base, extra = divmod(length, degree)
    return [base + (i < extra) for i in range(degree)]


class Ulysses:
    """The sequence-parallel hooks of one rank, installed into a ``WanDiT`` with ``install``.

    ``shard`` runs first in every forward and records the token split that ``self_attention``,
    ``attention`` and ``gather`` then use.

    Args:
        ctx: this rank's process group (``ctx.ulysses_degree`` > 1).
        num_heads: the DiT's attention heads.
        head_groups: how the N/P heads of a rank are pipelined (``plan.head_group_sizes``): a
            count, or the group sizes; default ``plan.DEFAULT_ULYSSES_HEAD_GROUPS`` of the
            transport.
        transport: how the all-to-alls move data (``exchange.TRANSPORTS``): ``nccl`` or
            ``copy-engine`` (CUDA, one host); default ``plan.ulysses_transport``'s choice.

    Raises:
        UsageError: the Ulysses degree does not divide ``num_heads``, bad ``head_groups``, or
            a transport this run cannot use.
    """

    def __init__(
        self,
        ctx: ParallelContext,
        num_heads: int,
        head_groups: int | tuple[int, ...] | None = None,
        transport: str | None = None,
    ):
        check_heads(num_heads, ctx.ulysses_degree, ctx.cfg_degree)
        self.ctx = ctx
        self.degree = ctx.ulysses_degree
        self.index = ctx.ulysses_rank
        transport = transport or ulysses_transport(
            ctx.device.type, ctx.local_world_size, self.degree, ctx.device.type == "cuda" and peer_access(ctx)
        )
        if head_groups is None:
            head_groups = DEFAULT_ULYSSES_HEAD_GROUPS.get(transport, 1)  # an unknown name fails below
        self.group_sizes = head_group_sizes(num_heads // self.degree, head_groups)
        self.transport = make_transport(transport, ctx)
        self._sizes: list[int] = []

    def install(self, dit: torch.nn.Module) -> None:
        """Shard ``dit``'s tokens and take over its self-attention: the whole module on the
        torch-op path, the attention call on the fused one (cross-attention keeps the plain
        call: its keys are the text tokens every rank has)."""
        dit.sequence_parallel = self
        for block in dit.blocks:
            block.self_attn.sequence_parallel = self
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

    def self_attention(
        self,
        attn: torch.nn.Module,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        backend: AttentionBackend,
    ) -> torch.Tensor:
        """The self-attention of ``attn`` (a ``dit.Attention``) for this rank's tokens, its q, k
        and v produced straight into the transport's send buffers (the module docstring's copy
        count).

        v goes first, then k, then q: each one's all-to-alls start as soon as it is stored and
        travel while the next one is projected, normalized and rotated.

        Args:
            x: [B, L_r, dim] in the model dtype; rope: cos, sin [L_r, 1, D/2] of these tokens.

        Returns:
            [B, L_r, dim], the output projection, in the model dtype.

        Raises:
            ParallelError: an all-to-all failed.
        """
        b, _, dim = x.shape
        heads = attn.num_heads
        call = self._start(b, dim // heads, x.dtype, x.device)
        call.project(_V, attn.v, x)
        self._send(call, (_V,))
        for i, proj, norm in ((_K, attn.k, attn.norm_k), (_Q, attn.q, attn.norm_q)):
            t = norm(proj(x)).unflatten(-1, (heads, -1))  # [B, L_r, N, D]
            # RoPE's rounding to the model dtype, stored where the transport sends from
            call.store(i, apply_rope_fp32(t, *rope))
            self._send(call, (i,))
        return attn.o(self._attend(call, backend).flatten(2))  # [B, L_r, dim]

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: AttentionBackend) -> torch.Tensor:
        """Self-attention over all L tokens with this rank's N/P heads, group by group, for q, k
        and v made elsewhere (``wan/fused.py``): each is copied into the send buffers.

        Args:
            q, k, v: [B, L_r, N, D] (RoPE applied), one dtype.

        Returns:
            [B, L_r, N, D] in the dtype of ``q``, valid until the next call (with the
            copy-engine transport it lives in the transport's workspace).

        Raises:
            ParallelError: an all-to-all failed.
        """
        b, _, _, d = q.shape
        call = self._start(b, d, q.dtype, q.device)
        for i, t in enumerate((q, k, v)):
            call.store(i, t)
        self._send(call, (_Q, _K, _V))  # group by group: the first group's inputs arrive first
        return self._attend(call, backend)

    def _start(self, b: int, d: int, dtype: torch.dtype, device: torch.device):
        """The transport's exchange for one self-attention call."""
        with self.ctx.collective("setting up the Ulysses exchange"):
            return self.transport.start(self._sizes, self.index, b, self.group_sizes, d, dtype, device)

    def _send(self, call, tensors: tuple[int, ...]) -> None:
        """Start moving ``tensors`` (indices into q, k, v) of every group, group by group,
        after the compute stream's work issued so far."""
        with ranges.named_range(QKV_ALL_TO_ALL), self.ctx.collective("the Ulysses all-to-all of q, k, v"):
            call.send(tensors)

    def _attend(self, call, backend: AttentionBackend) -> torch.Tensor:
        """Attention of each group once its inputs arrived, its output sent back while the next
        group's runs. Returns [B, L_r, N, D] in the buffers' dtype."""
        for g in range(len(self.group_sizes)):
            with self.ctx.collective("the Ulysses all-to-all of q, k, v"):
                q, k, v = call.inputs(g)  # the compute stream waits for the transfer; the host does not
            o = attention(q, k, v, backend)
            with (
                ranges.named_range(OUT_ALL_TO_ALL),
                self.ctx.collective("the Ulysses all-to-all of the attention output"),
            ):
                call.send_output(g, o)
        with self.ctx.collective("the Ulysses all-to-all of the attention output"):
            return call.output()

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


def shard_dit(
    ctx: ParallelContext,
    dit: torch.nn.Module,
    head_groups: int | tuple[int, ...] | None = None,
    transport: str | None = None,
) -> None:
    """Install Ulysses into ``dit`` when this run has a Ulysses degree above 1 (else nothing).

    Raises:
        UsageError: the degree does not divide the DiT's heads (``check_heads``), bad
            ``head_groups`` (``plan.head_group_sizes``) or ``transport`` (``Ulysses``).
    """
    if ctx.ulysses_degree > 1:
        Ulysses(ctx, dit.cfg.num_heads, head_groups, transport).install(dit)
