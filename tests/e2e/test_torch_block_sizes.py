"""The tensor layer's block sizes (preload/torch.c): a block whose real size is not what its
request rounds to gets it from PyTorch's allocator statistics, settled before the block's free,
or keeps its estimate when the statistics cannot tell (reset in between, also by another thread
while a phase boundary reads them), never another size; a
free says its block's size, 0 for a block never seen allocated; and the statistics are read
once per allocation at most (and once to start from): a temporary allocated and freed over and
over costs one read a pair, a run of frees none."""
import json
import re
import sys

import pytest

from conftest import DOUBLES, PROGRAM_SOURCES, build_fake_c10, program, trace

TENSOR_API = "torch.CUDACachingAllocator"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("block_sizes")
    fake_c10 = build_fake_c10(tmp / "fake")
    t = trace(tmp, [sys.executable, PROGRAM_SOURCES / "torch_block_sizes.py", program("libpyalloc_lib.so")],
              env={"LD_LIBRARY_PATH": str(DOUBLES), "FAKETORCH_C10": fake_c10})
    assert t.returncode == 0, t.stderr
    return t, json.loads(t.stdout.splitlines()[-1])


def traced_blocks(t):
    """Each tensor block in allocation order: its address, the size the trace gives it while
    it lives (the allocation's, then any BLOCK_SIZE's) and its free's size; and the frees of
    blocks the trace never saw allocated, as (address, size)."""
    blocks, live, unseen = [], {}, []
    for r in t.records:
        if r.api != TENSOR_API:
            continue
        if r.op == "block_alloc":
            live[r["addr"]] = {"addr": r["addr"], "size": r["size"]}
            blocks.append(live[r["addr"]])
        elif r.op == "block_size":
            assert r["addr"] in live, f"a size for a block that is not live: {r}"
            live[r["addr"]]["size"] = r["size"]
        elif r.op == "block_free" and r["addr"] in live:
            live.pop(r["addr"])["freed"] = r["size"]
        elif r.op == "block_free":
            unseen.append((r["addr"], r["size"]))
    assert not live, live
    return blocks, unseen


def test_every_block_has_its_real_size_before_its_free(job):
    t, truth = job
    blocks, _ = traced_blocks(t)
    assert [b["addr"] for b in blocks] == [b["addr"] for b in truth["blocks"]]
    # reset before their counters could tell: they keep their estimates
    reset = {truth["reset_block"], truth["raced"]["waiting"]}
    for i, (got, real) in enumerate(zip(blocks, truth["blocks"])):
        if i in reset:
            assert got["size"] == real["estimate"], (i, got, real)
        else:
            assert got["size"] == real["size"], (i, got, real)


def test_a_free_says_its_blocks_size_or_that_it_cannot_tell(job):
    t, truth = job
    blocks, unseen = traced_blocks(t)
    assert [b["freed"] for b in blocks] == [b["size"] for b in blocks]
    # blocks from before the tracker (one freed before a reset, one after): not known to be live
    assert unseen == [(b["addr"], 0) for b in truth["unseen"]], unseen


def test_a_repeated_temporary_costs_one_statistics_read_a_pair(job):
    _, truth = job
    assert truth["temporary_reads"] <= truth["pairs"] + 1, truth["temporary_reads"]


def test_the_statistics_are_read_once_per_allocation_at_most(job):
    """Once for each block (to settle it), once per device to start from, and once at each phase
    boundary that finds a block waiting for its size."""
    _, truth = job
    most = len(truth["blocks"]) + 2 + truth["boundaries_with_a_block_waiting"]
    assert 0 < truth["reads"] <= most, (truth["reads"], most)


def test_a_phase_boundary_settles_the_block_waiting_for_its_size(job):
    """Totals at a boundary are exact: the last block allocated before it has its size there."""
    t, truth = job
    last = truth["blocks"][truth["boundary_block"]]
    ops = [(r.op, r.fields.get("addr")) for r in t.records if r.op in ("block_alloc", "block_size", "phase_enter")]
    born = [i for i, (op, _) in enumerate(ops) if op == "block_alloc"][truth["boundary_block"]]
    assert ops[born] == ("block_alloc", last["addr"])
    assert ops[born + 1:born + 3] == [("block_size", last["addr"]), ("phase_enter", None)], ops[born:]


def test_each_device_sizes_its_own_blocks(job):
    """A block of device 1 between a block of device 0 and that block's free: each is settled by
    its own device's statistics, and the trace says which device each is on."""
    t, truth = job
    blocks, _ = traced_blocks(t)
    i = truth["second_device"]["block"]
    assert (blocks[i - 1]["size"], blocks[i]["size"]) == (truth["blocks"][i - 1]["size"], truth["blocks"][i]["size"])
    devices = [r.device for r in t.records if r.api == TENSOR_API and r.op == "block_alloc"]
    assert devices[i - 1:i + 1] == [0, 1] and devices.count(1) == 1, devices


def test_the_trace_names_the_torch_release_whose_allocator_it_read(job):
    """The release is a fact the preload learns inside the first allocation's hook, before the
    trace's file exists: it is kept, and written when the file is made."""
    t, _ = job
    assert re.search(r"^# torch = \d+\.\d+", t.dump_text, re.M), t.dump_text[:2000]
