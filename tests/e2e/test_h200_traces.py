"""The analyzer against traces recorded on a real GPU (an NVIDIA H200, torch 2.11.0+cu130,
Python 3.12), kept in tests/golden/h200/ with what each program measured about itself at the
same instant (tests/golden/h200/TRUTH.json: memory_allocated(), memory_reserved(), CuPy's and
XLA's pool figures, the sizes a static-cudart binary allocated).

These pin the reading of real traces: native stacks through libc10_cuda/libcublas/libnccl,
PyTorch's tensor events, the driver's VMM calls behind expandable segments and JAX, Python
frames from CPython 3.12. They were recorded by scripts/gpu_verify.py and scripts/gpu/run_all.py;
the comparisons of the former are reused here as they are.

The traces cupy, jax, nccl, static-binary and torch-* were recorded before the build attached
PyTorch's tensor events; they are checked at the CUDA layer only.
"""
import importlib.util
import json
import re

import pytest

from conftest import GOLDEN, SOURCE, VRAMTRACE, analyze, human
from replay import Replay, frame_module

H200 = GOLDEN / "h200"
TRUTH = json.loads((H200 / "TRUTH.json").read_text())


def _gpu_verify():
    spec = importlib.util.spec_from_file_location("gpu_verify", SOURCE / "scripts" / "gpu_verify.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_verify = _gpu_verify()
CHECKS = {name: check for name, _argv, _env, check in gpu_verify.SCENARIOS}


def report_at_truth(name):
    return json.loads(analyze("report", "--json", "-q", "--top", "20", "--until-mark", "vramtrace-truth",
                              H200 / f"{name}.vrt").stdout)


def leaks_json(name, *args):
    return json.loads(analyze("leaks", "--json", "-q", *args, H200 / f"{name}.vrt").stdout)


@pytest.mark.parametrize("name", ["torch-expandable", "torch-pinned", "torch-async", "cupy", "jax",
                                  "static-binary"])
def test_cuda_layer_equals_what_the_framework_reports(name):
    rows = CHECKS[name](name, TRUTH[name], report_at_truth(name))
    checked = [r for r in rows if r["must_match"] and not r["what"].startswith("tensor bytes")]
    assert checked, rows
    for r in checked:
        assert r["traced"] == r["truth"], r


def by_libnccl(item):
    return any(frame_module(f).startswith("libnccl.so") for f in item.frames)


def test_nccl_buffers_are_attributed_to_libnccl():
    report = report_at_truth("nccl")
    # What the trace's own records hold at the mark (tests/e2e/replay.py, not the analyzer's
    # model): the allocations and VMM handles whose allocating stack runs through libnccl.
    records = Replay(H200 / "nccl.vrt", VRAMTRACE, until="vramtrace-truth")
    nccl_device = records.held_bytes(lambda it: by_libnccl(it) and (it.device, it.kind) == (0, "device"))
    nccl_pinned = records.held_bytes(lambda it: by_libnccl(it) and it.kind == "host_pinned")
    assert nccl_device > 0 and nccl_pinned > 0
    assert gpu_verify.site_bytes(report, "libnccl") == nccl_device + nccl_pinned
    # every device byte outside PyTorch's pool, and every pinned host byte, was allocated by
    # libnccl (through cuMem* with NCCL_CUMEM_ENABLE's default, and its static cudart)
    pytorchs = gpu_verify.device_live(report, key="pytorch_allocator_bytes")
    assert gpu_verify.device_live(report) - pytorchs == nccl_device
    assert gpu_verify.device_live(report, kind="host_pinned", device=-1) == nccl_pinned
    truth = TRUTH["nccl"]
    assert pytorchs == truth["torch_reserved_delta"]  # memory_reserved() grew by exactly that
    # the device's own count also holds context and module growth, which are no allocations
    assert nccl_device <= truth["meminfo_delta"] - truth["torch_reserved_delta"]


def test_tensor_layer_equals_memory_allocated_at_every_phase_boundary():
    truth = TRUTH["tensor-default"]
    phases = leaks_json("tensor-default", "--phase", "step", "--layer", "tensors")["phases"]
    entries = [b["allocated"] for b in truth["boundaries"] if b["at"] == "entry"]
    exits = [b["allocated"] for b in truth["boundaries"] if b["at"] == "exit"]
    assert [p["live_bytes_at_entry"] for p in phases] == entries
    assert [p["live_bytes_at_exit"] for p in phases] == exits


def test_tensor_layer_names_the_leaking_line():
    found = leaks_json("tensor-default", "--phase", "step", "--layer", "tensors")
    assert found["growth_per_invocation_bytes"] == 262656
    assert found["summary"].endswith(": 100% from leak_this (tensor_proof.py:31)"), found["summary"]


def python_lines(survivor):
    return {(f["file"].rsplit("/", 1)[-1], f["line"]) for f in survivor["frames"] if f["kind"] == "python"}


@pytest.mark.parametrize("name", ["leak-registry", "leak-cycle"])
def test_leaks_growth_per_call_equals_pytorch_and_names_every_leaking_line(name):
    truth = TRUTH[name]
    found = leaks_json(name, "--phase", "train", "--until-mark", "vramtrace-truth")
    entries = truth["allocated_at_entry"]
    assert [p["live_bytes_at_entry"] for p in found["phases"]] == entries
    steady = (entries[-1] - entries[1]) / (len(entries) - 2)
    assert found["growth_per_invocation_bytes"] == pytest.approx(steady, abs=1)
    blamed = set().union(*(python_lines(s) for s in found["survivors"] if not s["persistent"]))
    # the lines of Engine.__init__ that allocate fp32_master, exp_avg, exp_avg_sq and flat_grads:
    # every one of them is left behind each call
    lines = {("leak_repro.py", n) for n in truth["leak_lines"]}
    assert lines <= blamed
    # The headline merges those lines into one range of Engine.__init__, with their share of
    # what the blamed survivors hold.
    m = re.match(r"\+\d+ MiB per train\(\) call: (\d+)% from Engine\.__init__ \(leak_repro\.py:(\d+)-(\d+)\)",
                 found["summary"])
    assert m and (int(m[2]), int(m[3])) == (min(truth["leak_lines"]), max(truth["leak_lines"])), found["summary"]
    engine = sum(s["bytes"] for s in found["survivors"] if not s["persistent"] and python_lines(s) & lines)
    total = sum(s["bytes"] for s in found["survivors"] if not s["persistent"])
    assert int(m[1]) == round(100 * engine / total)


def test_fixed_engine_blames_nothing_and_labels_the_cublas_workspace():
    found = leaks_json("leak-fixed", "--phase", "train", "--until-mark", "vramtrace-truth")
    entries = TRUTH["leak-fixed"]["allocated_at_entry"]  # memory_allocated() at each train() entry
    assert [p["live_bytes_at_entry"] for p in found["phases"]] == entries
    assert entries[1:] == [entries[1]] * (len(entries) - 1)  # level from the second call on
    assert found["growth_per_invocation_bytes"] == 0
    assert found["summary"].startswith("no growth")
    assert found["survivors"] and all(s["persistent"] for s in found["survivors"])
    assert all(s["phase_index"] == 1 for s in found["survivors"])


def test_report_marks_pinned_host_memory_in_the_list_of_device_memory():
    """oom_repro.py keeps its optimizer's state in pinned host memory (CPUOffloadAdam, 3 x 1 GiB);
    the list of what is live at the end holds tensors, the allocator's cache and every other CUDA
    allocation, so those three say they are host memory, and no device allocation does."""
    d = json.loads(analyze("report", "--json", "-q", H200 / "oom.vrt").stdout)
    oom = json.loads(analyze("oom", "--json", "-q", H200 / "oom.vrt").stdout)["oom"]
    sites = d["live_at_end"]
    host = [s for s in sites if s.get("kinds") == ["host_pinned"]]
    assert sum(s["bytes"] for s in host) == oom["host_pinned_bytes"] == 3 << 30
    assert all(s["headline"]["function"] == "CPUOffloadAdam.__init__" for s in host)
    assert all(s.get("kinds") in (None, ["device"]) for s in sites if s not in host)
    text = analyze("report", "-q", H200 / "oom.vrt").stdout
    listed = text.split("top sites by bytes live at the end", 1)[1].split("\n\n", 1)[0]
    assert listed.count("[host_pinned] CPUOffloadAdam.__init__") == len(host)
    assert listed.count("[host_pinned]") == len(host) and "[device]" not in listed


def test_report_says_the_trace_ran_out_of_memory_and_what_explains_it():
    d = json.loads(analyze("report", "--json", "-q", H200 / "oom.vrt").stdout)
    oom = json.loads(analyze("oom", "--json", "-q", H200 / "oom.vrt").stdout)
    assert d["out_of_memory_events"] == 1 == len([oom["oom"]])
    text = analyze("report", "-q", H200 / "oom.vrt").stdout.splitlines()
    assert text[2] == f"it ran out of memory: 1 out-of-memory event; `vramtrace oom {H200 / 'oom.vrt'}` explains it"
    clean = json.loads(analyze("report", "--json", "-q", H200 / "leak-cycle.vrt").stdout)
    assert clean["out_of_memory_events"] == 0
    assert not any("out of memory" in l for l in analyze("report", "-q", H200 / "leak-cycle.vrt").stdout.splitlines()[:4])


def test_the_largest_batch_oom_names_is_below_the_one_that_failed():
    """oom_repro.py doubles its batch from 1024 until one fails (32768); the peaks of the small
    batches are level (fixed costs), so a line through all of them is too flat at the top and
    called a batch above the failing one a fit. The line from the largest finished batch to what
    the failing one needed goes by what the failure itself says."""
    oom = json.loads(analyze("oom", "--json", "-q", H200 / "oom.vrt").stdout)["oom"]
    failing = int(re.search(r"OOM at batch (\d+)", TRUTH["oom"]["message"])[1])
    largest = oom["largest_size_that_fits"]
    assert largest["failing_size"] == failing and largest["through_failure"] is True
    assert failing // 2 <= largest["size"] < failing  # the batch before it finished


def test_oom_matches_pytorchs_own_message():
    oom = json.loads(analyze("oom", "--json", "-q", H200 / "oom.vrt").stdout)["oom"]
    message = TRUTH["oom"]["message"]
    requested = float(re.search(r"Tried to allocate ([\d.]+) MiB", message)[1])
    by_pytorch = float(re.search(r"([\d.]+) GiB is allocated by PyTorch", message)[1])
    cached = float(re.search(r"([\d.]+) MiB is reserved by PyTorch but unallocated", message)[1])
    assert oom["requested_bytes"] == requested * (1 << 20)
    assert oom["tensor_bytes"] / (1 << 30) == pytest.approx(by_pytorch, abs=0.005)
    assert oom["by_category"]["allocator_cache"] / (1 << 20) == pytest.approx(cached, abs=0.005)
    categories = oom["by_category"]
    assert max(categories, key=categories.get) == "activations"
    # it failed in backward, on autograd's thread, which has no Python stack: the native one says
    # which backward function asked
    assert oom["thread"] == "pt_autograd_0"
    text = analyze("oom", "-q", H200 / "oom.vrt").stdout
    requested_by = text.split("requested by\n", 1)[1].split("\nwhere", 1)[0]
    assert "pow_backward" in requested_by and "CUDACachingAllocator" not in requested_by
    # the optimizer state offloaded to pinned host memory is shown, and not on the device
    assert oom["host_by_category"] == {"optimizer_state": oom["host_pinned_bytes"]} and oom["host_pinned_bytes"] > 0
    # the input batch (oom_repro.py:60, 256 MiB), the output's float copy (:61, 512 MiB) and the
    # loss (one 512-byte block) are the step's own tensors, not "no rule matched"
    assert categories.get("user_tensors") == (768 << 20) + 512 and "other" not in categories
    # Sizes known from oom_repro.py (DIM 4096, 8 layers of Linear + GELU, fp16; the failing
    # batch from PyTorch's message): the parameters, 8 x (4096 x 4096 + 4096) halves; the
    # activations autograd keeps for backward, 15 tensors of batch x 4096 halves: each Linear's
    # output (GELU's saved input) and each GELU's output but the last (the next Linear's saved
    # input; the last one is consumed by .float() and freed).
    dim, layers = 4096, 8
    batch = int(re.match(r"OOM at batch (\d+)", message)[1])
    assert categories["parameters"] == layers * (dim * dim + dim) * 2
    assert categories["activations"] == (2 * layers - 1) * batch * dim * 2


def test_attached_trace_finds_the_leak_between_marks():
    found = leaks_json("attach", "--phase", "mark:step")
    assert len(found["phases"]) == TRUTH["attach"]["marks"]
    top = found["survivors"][0]
    assert (TRUTH["attach"]["file"], TRUTH["attach"]["leak_line"]) in python_lines(top)
    report = json.loads(analyze("report", "--json", "-q", H200 / "attach.vrt").stdout)
    assert report["end"] == "tracing stopped (attach --stop)"


@pytest.mark.parametrize("name", ["jax", "nccl"])
def test_without_phase_no_compiler_pass_or_library_range_is_picked(name):
    # jax.vrt has XLA pass ranges (NVTX) that allocate nothing, nccl.vrt ncclGroupStart ranges:
    # neither explains growth, so leaks looks for growth at the low points instead.
    p = analyze("leaks", "--json", GOLDEN / "h200" / (name + ".vrt"))
    assert json.loads(p.stdout)["phase"] is None
    assert "looking for growth without phases (no phase has two or more calls that allocate)" in p.stderr


def test_without_phase_the_phase_whose_calls_bracket_the_growth_is_picked():
    p = analyze("leaks", "--json", GOLDEN / "h200" / "leak-cycle.vrt")
    found = json.loads(p.stdout)
    entries = TRUTH["leak-cycle"]["allocated_at_entry"]
    assert found["phase"] == "train" and found["layer"] == "tensors"  # the layer the survey saw blocks in
    assert found["phase_picked_because"] == "%d calls; memory at entry rises by %d MiB from the second call to the last" % (
        len(entries), round((entries[-1] - entries[1]) / (1 << 20)))
    assert "following train" in p.stderr


@pytest.mark.parametrize("command", ["report", "leaks", "oom"])
def test_a_site_never_repeats_its_headline_or_a_frame_in_a_row(command):
    """Under each site's headline its frames start at the first one that is not the headline, and
    a frame repeated in a row (recursion: Module._apply) is one line with its count."""
    collapsed = 0
    for trace in sorted(H200.glob("*.vrt")):
        p = analyze(command, "-q", trace, check=False)
        if p.returncode:
            continue  # oom on a trace without one
        lines = p.stdout.splitlines()
        for prev, cur in zip(lines, lines[1:]):
            head = re.match(r"^ +[\d.]+ (?:B|KiB|MiB|GiB|TiB) +\d+x  (.*)$", prev)
            frame = re.match(r"^ {20,}(?:at|in) (.*?)(?:  \(x\d+, recursion\))?$", cur)
            if head and frame:
                assert frame[1] != head[1], (trace.name, prev, cur)
            prev_frame = re.match(r"^ {20,}(?:at|in) (.*?)(?:  \(x\d+, recursion\))?$", prev)
            if prev_frame and frame:
                assert prev_frame[1] != frame[1], (trace.name, prev, cur)
        collapsed += sum("recursion)" in line for line in lines)
    if command == "leaks":
        assert collapsed > 0, "leak-cycle's Module._apply recursion is not collapsed"


def test_how_the_process_ended_reads_as_a_sentence():
    """report's second line and its note say it as a clause, whatever the end ("the process tracing
    stopped" was not English)."""
    p = analyze("report", H200 / "attach.vrt")
    assert p.stdout.splitlines()[1].endswith("; tracing was stopped (attach --stop) while the process went on")
    assert f"vramtrace: note: {H200 / 'attach.vrt'}: tracing was stopped (attach --stop) while the process went on" \
        in p.stderr.splitlines()
    assert analyze("report", H200 / "oom.vrt").stdout.splitlines()[1].endswith("; the process exited normally")


def test_a_mark_phase_is_worded_as_intervals_and_persistent_memory_by_what_it_is():
    """leaks --phase mark:step measures intervals between marks, not calls; "persistent by design"
    lists only the kinds present (leak-fixed: cuBLAS workspaces, no NCCL)."""
    p = analyze("leaks", "-q", "--phase", "mark:step", H200 / "attach.vrt")
    assert re.search(r'^\+[\d.]+ MiB per interval between "step" marks: ', p.stdout, re.M), p.stdout
    assert "step() call" not in p.stdout
    d = json.loads(analyze("leaks", "--json", "-q", "--phase", "mark:step", H200 / "attach.vrt").stdout)
    assert d["invocation"] == 'interval between "step" marks' and d["summary"].startswith("+")
    fixed = analyze("leaks", "-q", H200 / "leak-fixed.vrt").stdout
    line, = [l for l in fixed.splitlines() if l.startswith("persistent by design")]
    assert "NCCL" not in line and re.search(r"\(cuBLAS/cuDNN workspaces [\d.]+ MiB; set up once\)$", line), line
    assert "freed before the next one started, apart from what was set up once (below)" in fixed


def test_oom_names_the_cap_even_when_the_trace_did_not_record_it():
    """oom.vrt predates the limits record: the replay finds the device did not refuse, so a cap
    did, and the headline says so next to "132 GiB free" (ux defect 3); a recorded cap is named as
    recorded."""
    text = analyze("oom", H200 / "oom.vrt").stdout.splitlines()
    assert text[3] == "device memory    132 GiB free (as PyTorch reported)"
    # Not recorded, so a range: at least the recorded peak, under what was reserved plus the
    # request; PyTorch's own message ("6.99 GiB allowed") lies in it, where the single figure
    # the line gave before (6.82 GiB) did not name the cap.
    m = re.match(r"limit hit        a per-process cap of at least ([\d.]+) GiB \(the most PyTorch had reserved\) "
                 r"and under ([\d.]+) GiB \(the [\d.]+ GiB it had reserved, and this request\); inferred: ", text[4])
    allowed = float(re.search(r"([\d.]+) GiB allowed", TRUTH["oom"]["message"])[1])
    assert m and float(m[1]) <= allowed < float(m[2]), (text[4], allowed)
    o = json.loads(analyze("oom", "--json", H200 / "oom.vrt").stdout)["oom"]
    assert o["limit_refused"] is True and o["limit_bytes"] > o["live_bytes"]
    recorded = analyze("oom", H200 / "retain-ds-oom-offload.vrt").stdout.splitlines()
    assert recorded[4].startswith("limit hit        the per-process cap: PyTorch may reserve 5.59 GiB "
                                  "(set_per_process_memory_fraction)")


def test_the_tensor_peak_list_says_it_holds_more_than_tensors():
    """attach.vrt's 1.13 GiB pre-attach pseudo-site is CUDA-level memory, listed at the 394 MiB
    tensor peak: the heading says the list is what was live then, not tensors alone (ux defect 15)."""
    text = analyze("report", "-q", H200 / "attach.vrt").stdout
    head = re.search(r"^top sites at the peak of device 0 tensors \(([^)]*)\):\n +([\d.]+ \w+) +1x  (.*)$", text, re.M)
    assert head and head[1].endswith("; live then: tensors, allocator cache, other CUDA"), text
    assert head[3] == "[allocated before attach, unattributed]"


def test_peak_headings_name_the_memory_in_words():
    """A heading is a phrase: "pinned host memory", "device 0 memory", never the table's
    identifiers run together ("host host_pinned", "device 0 device": ux defect 32)."""
    subjects = set()
    for trace in sorted(H200.glob("*.vrt")):
        text = analyze("report", "-q", trace).stdout
        subjects |= set(re.findall(r"^top sites at the peak of (.*) \(", text, re.M))
    assert "pinned host memory" in subjects and "device 0 memory" in subjects, subjects
    assert all(re.fullmatch(r"device \d+ (memory|tensors)|pinned host memory|managed memory( on device \d+)?",
                            s) for s in subjects), subjects


@pytest.mark.parametrize("name", ["cupy", "static-binary"])
def test_a_static_runtimes_internals_never_head_a_site(name):
    """cupy.vrt and static-binary.vrt have no Python frames: their sites headed with
    libcudart_static_<hash>+0x2e, the runtime's stripped internals (ux defect 18); the headline is
    the first frame past them (CuPy's malloc, the program's main)."""
    sites = json.loads(analyze("report", "--json", "-q", H200 / f"{name}.vrt").stdout)["live_at_end"]
    assert sites
    for site in sites:
        assert not site["headline"]["function"].startswith("libcudart_static_"), site["headline"]
        assert site["frames"][0]["function"].startswith("libcudart_static_")  # what it looks past


def test_each_survivor_says_what_one_call_left_as_the_headline_does():
    """The headline is per call, the site lines are totals over the calls: each site also says
    what one call left (ux defect 29). leak-registry keeps 80 MiB per call at Engine.__init__:51."""
    out = analyze("leaks", "-q", H200 / "leak-registry.vrt").stdout
    mine = [s for s in leaks_json("leak-registry")["survivors"]
            if (s["headline"]["function"], s["headline"]["line"]) == ("Engine.__init__", 51)]
    calls = {s["phase_index"] for s in mine}
    total = sum(s["bytes"] for s in mine)
    assert calls == {1, 2, 3} and f"born in calls 1..3, {human(total // 3)} a call," in out


def test_library_frames_print_from_their_import_root_and_the_json_keeps_the_path():
    """A text line shows torch/nn/modules/module.py:1790, not the virtualenv's whole path (ux
    defect 28: lines of 250-500 characters); the user's own files and the JSON keep theirs."""
    out = analyze("leaks", "-q", H200 / "leak-cycle.vrt").stdout
    assert "(torch/nn/modules/module.py:1097)" in out and "site-packages" not in out
    assert "/work/main/scripts/gpu/leak_repro.py:52)" in out
    frames = [f for s in leaks_json("leak-cycle")["survivors"] for f in s["frames"]]
    assert any(f["file"].endswith("/site-packages/torch/nn/modules/module.py") for f in frames)
