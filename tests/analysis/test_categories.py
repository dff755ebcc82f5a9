"""Kernel categories on real kernel names across stacks (class 3 of the real-trace issue: AMD,
Triton and our own kernels fell into ``other``).

``tests/data/kernel_names.csv``: 166 kernel names as profilers print them (CUDA, ROCm, Triton
and Inductor, cuDNN, CUTLASS, cuBLAS and nvJet, FlashAttention 2 and 3, FlashInfer, xformers,
SageAttention, composable kernel, aiter, MIOpen, NCCL and RCCL, vLLM, FBGEMM, ours), each with
the public file, issue or trace it was copied from, and the category it belongs to, decided by
hand from what the kernel does (its source)."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from wanscope.analysis.categories import OTHER, categorize, rules, sql_case

TABLE = Path(__file__).parents[1] / "data" / "kernel_names.csv"
ROWS = list(csv.DictReader(TABLE.read_text(encoding="utf-8").splitlines()))


def test_the_table_is_real_names_with_sources_across_stacks():
    assert len(ROWS) >= 80 and len({(r["name"], r["stack"]) for r in ROWS}) == len(ROWS)
    # a name two stacks share (the Triton tutorial's and SageAttention's _attn_fwd) is one category
    assert len({(r["name"], r["category"]) for r in ROWS}) == len({r["name"] for r in ROWS})
    assert all(r["source"].startswith(("github:", "https://github.com/", "wanscope:")) for r in ROWS)
    stacks = Counter(r["stack"] for r in ROWS)
    for stack in ("cublas", "cudnn", "fa2", "fa3", "inductor", "triton_attention", "hipblaslt", "ck", "aiter", "nccl"):
        assert stacks[stack] >= 1, stack
    categories = {category for category, _ in rules()} | {OTHER}
    assert {r["category"] for r in ROWS} <= categories


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['stack']}:{r['name'][:60]}")
def test_category_of_a_real_kernel_name(row):
    assert categorize(row["name"]) == row["category"]


def test_sql_gives_the_same_categories_as_python():
    con = duckdb.connect()
    con.execute("CREATE TABLE k (name VARCHAR)")
    con.executemany("INSERT INTO k VALUES (?)", [[r["name"]] for r in ROWS])
    got = dict(con.execute(f"SELECT name, {sql_case('name')} FROM k").fetchall())
    assert got == {r["name"]: r["category"] for r in ROWS}


@pytest.mark.parametrize(
    "name, category",
    [
        # an Inductor attention template is attention, any other Inductor kernel triton_fused,
        # even one named after an attention op it fused around
        ("triton_tem_fused_flex_attention_0", "attention"),
        ("triton_poi_fused__scaled_dot_product_cudnn_attention_add_0", "triton_fused"),
        # communication before attention: FlashInfer's all-reduce is not one of its attention kernels
        ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<x>(y)", "communication"),
        # attention before gemm and conv: FlashAttention 3 runs inside cutlass::device_kernel, and
        # cuDNN's attention kernel is an fprop
        ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<x>>>(y)", "attention"),
        # conv before gemm: cuDNN's implicit-GEMM convolutions name gemm
        ("void cudnn::detail::implicit_convolve_sgemm<float, float, 512>(int)", "conv"),
        # copies before elementwise: ATen's copies are elementwise kernels
        ("void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda>(int)", "copy_cast"),
        # a KV-cache write named flash is not attention
        ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(int)", "copy_cast"),
        ("some_kernel_of_nobody", OTHER),
    ],
)
def test_precedence_where_two_rules_match(name, category):
    assert categorize(name) == category
