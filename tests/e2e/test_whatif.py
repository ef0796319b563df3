"""`vramtrace whatif`: the caching-allocator model replayed on traces recorded on the H200
(torch 2.11.0+cu130), tests/golden/h200/.

Under the setting a trace was recorded with, the replay must reproduce what PyTorch's allocator
did: every cudaMalloc/cudaFree (cuMemMap/cuMemUnmap with expandable segments) at the same
request, every block at its recorded address, the peak reserved and allocated memory to the
byte, and where PyTorch raised out of memory, the same request with the same figures. Traces
recorded by scripts/gpu/whatif_record.py (whatif-*.vrt, with their truth in TRUTH.json) join the
list when they are in the tree: the same Llama training run under three allocator settings,
uncapped and capped, also checked across settings (the run recorded with one setting, replayed
under another, against the run recorded with that other).
"""
import json

import pytest

from conftest import GOLDEN, analyze

H200 = GOLDEN / "h200"
TRUTH = json.loads((H200 / "TRUTH.json").read_text())
GiB = 1 << 30

# Every H200 trace with PyTorch tensor events and the allocator's whole history (attach.vrt
# began after the allocator had segments; the others predate tensor tracking).
RECORDED = ["tensor-default", "oom", "leak-fixed", "leak-cycle", "leak-registry", "retain-hf-history",
            "retain-accelerate", "retain-ds-zero2", "retain-ds-oom-offload", "remedies-ds-oom-offload",
            "remedies-expandable"]
WHATIF = sorted(p.stem for p in H200.glob("whatif-*.vrt"))


def whatif(name, *args, check=True):
    p = analyze("whatif", "--json", "-q", *args, H200 / f"{name}.vrt", check=check)
    return json.loads(p.stdout) if p.returncode == 0 else p


@pytest.mark.parametrize("name", RECORDED + WHATIF)
def test_recorded_setting_reproduces_the_segment_history(name):
    d = whatif(name)
    c = d["check"]
    assert d["as_recorded"] and d["model"] == "PyTorch 2.11"
    assert c["mismatched_requests"] == 0, c["first_mismatch"]
    assert c["recorded_segment_ops"] == c["model_segment_ops"] > 0
    assert c["blocks_at_recorded_address"] == c["blocks"] == d["requests"] - (1 if d["fails_at"] else 0)
    assert d["peak_reserved"] == d["recorded_peak_reserved"]
    assert d["peak_allocated"] == d["recorded_peak_allocated"]


def test_the_oom_is_the_request_and_the_state_pytorch_reported():
    """DeepSpeed ZeRO-2 + offload_optimizer under a 0.04 fraction: PyTorch's own figures at the
    failure (TRUTH.json, from its out-of-memory observer) are the replay's."""
    truth = TRUTH["retain-ds-oom-offload"]
    f = whatif("retain-ds-oom-offload")["fails_at"]
    assert f["in_trace"] and f["cause"] == "limit"
    assert f["request"] == truth["requested"]
    assert f["reserved"] == truth["reserved"]
    assert f["allocated"] == truth["allocated"]
    assert f["limit"] == truth["allowed"]


def test_empty_cache_calls_are_found_where_the_program_made_them():
    """leak_repro.py calls empty_cache() after each of its 4 train() calls, each time with cached
    segments to give back; the allocator's own frees never count as one."""
    for variant in ("fixed", "cycle", "registry"):
        assert whatif("leak-" + variant)["empty_cache_calls"] == 4
    assert whatif("tensor-default")["empty_cache_calls"] == 0
    assert whatif("retain-hf-history")["empty_cache_calls"] == 0


def test_a_limit_is_never_passed_and_the_first_failure_is_named():
    d = whatif("leak-fixed")
    limit = d["peak_reserved"] // 2
    capped = whatif("leak-fixed", "--allocator-limit", str(limit))
    f = capped["fails_at"]
    assert f and f["cause"] == "limit" and not f["in_trace"] and f["limit"] == limit
    assert capped["peak_reserved"] <= limit
    assert f["reserved"] <= limit and f["stack"]["frames"]
    assert not capped["as_recorded"] and capped["check"] is None
    # a limit just at the recorded peak changes nothing: every request fits
    at_peak = whatif("leak-fixed", "--allocator-limit", str(d["peak_reserved"]))
    assert at_peak["fails_at"] is None and at_peak["peak_reserved"] == d["peak_reserved"]


def test_a_smaller_device_refuses_new_segments():
    """A device of half the recorded peak: memory outside the allocator stays as recorded, so the
    first cudaMalloc that does not fit what is left fails (after the cache is freed), not a limit."""
    d = whatif("leak-fixed")
    size = d["peak_reserved"] // 2
    small = whatif("leak-fixed", "--device-memory", str(size))
    f = small["fails_at"]
    assert small["device_memory"] == size and small["allocator_limit"] is None
    assert f and f["cause"] == "device" and f["reserved"] < size
    assert small["peak_reserved"] < size


def test_lifting_the_trace_limit_avoids_its_oom():
    """The OOM of retain-ds-oom-offload came from the 5.59 GiB cap: with the device's 139 GiB
    instead, the failing request fits and the replay stops there (the run would differ after)."""
    d = whatif("retain-ds-oom-offload", "--allocator-limit", "100G")
    assert d["fails_at"] is None and d["recorded_oom_avoided"]
    assert d["allocator_limit"] == 100 * GiB and d["limit_source"] == "--allocator-limit"


def test_other_settings_change_the_replay():
    base = whatif("retain-ds-zero2")
    exp = whatif("retain-ds-zero2", "--alloc-conf", "expandable_segments:True")
    assert exp["alloc_conf"] == "expandable_segments:True" and exp["recorded_alloc_conf"] == ""
    dev = exp["devices"][0]
    assert dev["cuda_malloc"] == 0 and dev["bytes_mapped"] > 0
    # one growing segment per stream and pool wastes less than cudaMalloc'd segments; and every
    # block is split down to its rounded size (a remainder of 512 bytes is enough), where the
    # large pool keeps up to 1 MiB unsplit: never more allocated
    assert exp["peak_reserved"] < base["peak_reserved"]
    assert exp["peak_allocated"] < base["peak_allocated"]
    split = whatif("retain-ds-zero2", "--alloc-conf", "max_split_size_mb:128")
    assert split["peak_reserved"] != base["peak_reserved"]


def test_sizes_and_settings_are_checked():
    p = whatif("oom", "--alloc-conf", "max_spilt_size_mb:128", check=False)
    assert p.returncode == 2 and "max_spilt_size_mb" in p.stderr
    p = whatif("oom", "--alloc-conf", "max_split_size_mb:10", check=False)
    assert p.returncode == 2 and ">= 20" in p.stderr
    p = whatif("oom", "--allocator-limit", "lots", check=False)
    assert p.returncode == 2 and "--allocator-limit" in p.stderr
    d = whatif("oom", "--allocator-limit", "4.9G")
    assert d["allocator_limit"] == int(4.9 * GiB)
    p = analyze("whatif", "-q", H200 / "torch-expandable.vrt", check=False)
    assert p.returncode == 3 and "no PyTorch tensor events" in p.stderr


def test_text_output_names_the_setting_and_the_check():
    out = analyze("whatif", "-q", "--alloc-conf", "expandable_segments:True", H200 / "oom.vrt").stdout
    assert "setting    expandable_segments:True (recorded: the defaults)" in out
    # no "check" row under a changed setting (matched as a row: the trace's path may hold the word)
    assert "peak reserved" in out and "\ncheck " not in out
    out = analyze("whatif", "-q", H200 / "leak-fixed.vrt").stdout
    assert "did what the allocator did" in out and "4546 of 4546 blocks at the recorded address" in out


# ---- the whatif_record.py runs (when they are in the tree) ----------------------------------

def whatif_truth(name):
    truth = TRUTH.get(name)
    if truth is None:
        pytest.skip(f"{name} has no entry in TRUTH.json")
    return truth


@pytest.mark.parametrize("name", WHATIF)
def test_whatif_runs_match_what_torch_measured(name):
    truth = whatif_truth(name)
    d = whatif(name)
    assert d["peak_reserved"] == truth["max_memory_reserved"]
    assert d["peak_allocated"] == truth["max_memory_allocated"]
    assert bool(d["fails_at"]) == truth["oom"]


@pytest.mark.parametrize("setting", ["expandable", "split128"])
def test_whatif_the_default_run_predicts_the_others(setting):
    """The same requests, recorded under the default setting, replayed under another: the peak
    the run recorded under that other setting reached, to the byte where addresses cannot
    matter (expandable segments place blocks by offset)."""
    if f"whatif-{setting}" not in WHATIF or "whatif-default" not in WHATIF:
        pytest.skip("the whatif_record.py traces are not in the tree")
    target = whatif_truth(f"whatif-{setting}")
    d = whatif("whatif-default", "--alloc-conf", target["alloc_conf"])
    if setting == "expandable":
        assert d["peak_reserved"] == target["max_memory_reserved"]
    else:
        assert abs(d["peak_reserved"] - target["max_memory_reserved"]) <= 0.02 * target["max_memory_reserved"]
    assert d["peak_allocated"] == target["max_memory_allocated"]


@pytest.mark.parametrize("setting", ["default", "expandable", "split128"])
def test_whatif_the_cap_is_predicted_from_the_uncapped_run(setting):
    """Under the cap the capped runs ran with, the uncapped run of the same setting fails where
    the capped run failed, or fits where it fitted."""
    if f"whatif-{setting}" not in WHATIF or f"whatif-{setting}-capped" not in WHATIF:
        pytest.skip("the whatif_record.py traces are not in the tree")
    capped = whatif_truth(f"whatif-{setting}-capped")
    d = whatif(f"whatif-{setting}", "--allocator-limit", str(capped["allocator_limit"]))
    assert bool(d["fails_at"]) == capped["oom"]
    assert d["peak_reserved"] <= capped["allocator_limit"]


# ---- oom: what would make it fit --------------------------------------------------------------

def remedies(name):
    d = json.loads(analyze("oom", "--json", H200 / f"{name}.vrt").stdout)["oom"]
    return d, {m["name"]: m for m in d["remedies"]}


def test_oom_remedies_for_zero2_with_offload_optimizer():
    """The user story: ZeRO-2 + offload_optimizer under a cap. Offloading the optimizer could not
    help, its state was off the device already; the activations fill it. What was missing is the
    request plus what was reserved, past the cap (OOM_LIMITS)."""
    truth = TRUTH["retain-ds-oom-offload"]
    d, m = remedies("retain-ds-oom-offload")
    assert d["shortfall_bytes"] == truth["reserved"] + truth["requested"] - truth["allowed"]
    assert set(m) >= {"no per-process cap", "expandable_segments:True", "max_split_size_mb:128", "empty_cache()",
                      "activation checkpointing", "ZeRO-3 partitioning", "offload_param", "offload_optimizer",
                      "a smaller batch or sequence"}
    assert all(r["decided_by"] in ("replay", "identity", "rule") for r in d["remedies"])
    opt = m["offload_optimizer"]
    assert opt["frees_bytes"] == 0 and opt["fits"] is False and opt["decided_by"] == "identity"
    act = m["activation checkpointing"]
    assert act["decided_by"] == "identity" and act["fits"] is True
    assert act["frees_bytes"] == next(c["bytes"] for c in d["categories"] if c["name"] == "activations")
    assert m["no per-process cap"]["fits"] is True and m["no per-process cap"]["decided_by"] == "replay"
    z3 = m["ZeRO-3 partitioning"]
    assert z3["frees_bytes"] == 0 and z3["fits"] is False  # one rank: nothing to partition across
    params = next(c for c in d["categories"] if c["name"] == "parameters")
    assert m["offload_param"]["frees_bytes"] == params["bytes"]
    assert params["identity_bytes"] == truth["parameters"]  # what the program counted itself
    batch = m["a smaller batch or sequence"]
    assert batch["fits"] is True and "4 earlier calls of nvtx:DeepSpeedEngine.forward" in batch["detail"]
    # the settings were replayed up to the failing request under the same cap: expandable segments
    # make room for it, not for the rest of the forward pass (the batch doubled: so did its needs)
    exp = m["expandable_segments:True"]
    assert exp["frees_bytes"] > d["shortfall_bytes"] and exp["fits"] is False
    assert "the request fits, not the rest of the call of nvtx:DeepSpeedEngine.forward" in exp["detail"]
    assert m["offload_param"]["fits"] is False
    assert m["max_split_size_mb:128"]["fits"] is False
    call = d["failing_call"]
    assert call["what"] == "call of nvtx:DeepSpeedEngine.forward" and 1.9 < call["scale"] < 2.1
    assert call["requests"] < call["last_call_requests"] and call["rest_bytes"] > d["shortfall_bytes"]


def test_every_remedy_is_what_its_real_rerun_did():
    """scripts/gpu/remedies_check.py applied each remedy for real (its own process, the same
    batches up to the one that failed): the fit oom predicts from the trace of the failing run is
    what the re-run did. Two of them make room for the failing request and still fail a few
    requests later in the same forward pass (expandable segments, offload_param): "fits" is
    about the call, projected from the call before it."""
    truth = TRUTH["remedies-ds-oom-offload"]
    d, m = remedies("remedies-ds-oom-offload")
    assert d["shortfall_bytes"] == truth["reserved"] + truth["requested"] - truth["allowed"]
    checked = {name: (m[name]["fits"], real["fits"]) for name, real in truth["measured"].items() if name in m}
    assert len(checked) == len(truth["measured"]) - 1, checked  # all but the baseline
    assert all(predicted == measured for predicted, measured in checked.values()), checked
    # the largest batch oom says fits (a line through the earlier steps' peaks against the sizes
    # their marks name) is the largest that fitted for real
    largest = d["largest_size_that_fits"]
    assert largest["failing_size"] == 16
    assert largest["size"] == max(int(n) for n, r in truth["sizes"].items() if r["fits"])
    assert all(not r["fits"] for n, r in truth["sizes"].items() if int(n) > largest["size"])
    # the real expandable run failed in the same call as the recorded one, a few requests later
    exp = json.loads(analyze("oom", "--json", H200 / "remedies-expandable.vrt").stdout)["oom"]
    assert exp["failing_call"]["requests"] > d["failing_call"]["requests"]


def test_oom_does_not_rule_out_a_remedy_its_real_rerun_fitted():
    """whatif-default-capped failed in its second step under a cap; the same job with
    expandable_segments:True under the same cap ran every step (whatif-expandable-capped). The
    only step before the failing one is the first, which also built AdamW's state and made
    first-use requests: projected from it, the rest of the step is an estimate, so a remedy that
    fits the failing request is "not known" there, never "no"."""
    truth = TRUTH["whatif-expandable-capped"]
    assert truth["oom"] is False and truth["allocator_limit"] == TRUTH["whatif-default-capped"]["allocator_limit"]
    d, m = remedies("whatif-default-capped")
    assert d["failing_call"]["from_first_call"] is True
    assert m["expandable_segments:True"]["fits"] is None
    assert "if it goes as the first one did" in m["expandable_segments:True"]["detail"]
    # and whatif, replaying the same setting, makes room for the failing request
    text = analyze("whatif", "--alloc-conf", "expandable_segments:True", H200 / "whatif-default-capped.vrt").stdout
    assert "result     the request that failed at 16.053 s fits" in text


def test_a_replay_that_fails_early_still_knows_the_traces_limit_and_device():
    """What the trace says of its cap and its device comes with its out-of-memory error, after
    the request a smaller device or cap fails at: the replay must not run as if there were none
    (the cap, per the help, is the trace's own unless --allocator-limit gives one)."""
    base = whatif("retain-ds-oom-offload")
    assert base["limit_source"].startswith("PyTorch's figures")
    small = whatif("retain-ds-oom-offload", "--device-memory", "6G")
    assert small["device_memory"] == 6 << 30
    assert (small["allocator_limit"], small["limit_source"]) == (base["allocator_limit"], base["limit_source"])
    # a cap under which the replay fails early sizes the device as one under which it does not
    capped = whatif("retain-ds-oom-offload", "--allocator-limit", "4.9G")
    roomy = whatif("retain-ds-oom-offload", "--allocator-limit", "8G")
    assert capped["limit_source"] == "--allocator-limit" and capped["device_memory"] == roomy["device_memory"] > 100 << 30


def test_oom_remedies_text():
    out = analyze("oom", H200 / "retain-ds-oom-offload.vrt").stdout
    assert "what would make it fit" in out
    line = next(l for l in out.splitlines() if l.strip().startswith("offload_optimizer"))
    assert "0 B" in line and " no " in line and "[identity]" in line


def test_oom_remedies_in_the_html_report(tmp_path):
    from test_html import body_rows, dump_dom, element_block, html, needs_chromium, page_data
    if needs_chromium.args[0]:
        pytest.skip(needs_chromium.kwargs["reason"])
    out = tmp_path / "oom.html"
    html(H200 / "retain-ds-oom-offload.vrt", out)
    d = page_data(out)["oom"]["oom"]
    dom = dump_dom(tmp_path, out)
    table = element_block(dom, "table", "oom-remedies")
    assert body_rows(table) == len(d["remedies"]) >= 9
    assert "offload_optimizer" in table


# ---- diff by category -------------------------------------------------------------------------

def category_diff(*args):
    return json.loads(analyze("diff", "--by", "category", "--json", *args).stdout)


def test_diff_by_category_at_the_peak_and_at_the_oom():
    """ZeRO-2 without offload at its peak against ZeRO-2 + offload_optimizer at its OOM: the
    activations of the larger batch grew; the optimizer state left the device."""
    d = category_diff(H200 / "retain-ds-zero2.vrt", H200 / "retain-ds-oom-offload.vrt")
    assert d["a"]["at"] == "peak" and d["b"]["at"] == "oom" and d["b"]["retention_walk"]
    rows = {c["name"]: c for c in d["categories"]}
    for side in "ab":
        assert sum(c["bytes_" + side] for c in d["categories"]) == d[side]["live_bytes"]
    assert d["categories"][0]["name"] == "activations" and rows["activations"]["delta"] > 0
    assert rows["activations"]["decided_by_b"] == "identity"
    assert rows["optimizer_state"]["bytes_b"] == 0 < rows["optimizer_state"]["bytes_a"]
    assert all(c["delta"] == c["bytes_b"] - c["bytes_a"] for c in d["categories"])
    text = analyze("diff", "--by", "category", H200 / "retain-ds-zero2.vrt", H200 / "retain-ds-oom-offload.vrt").stdout
    assert "\nactivations grows by " in text and "every other category changes by at most" in text


def test_diff_by_category_of_one_time_against_itself_is_flat():
    d = category_diff(H200 / "oom.vrt", "--at", "10.9", "--at", "10.9")
    assert d["a"]["at"] == d["b"]["at"] == "time" and d["a"]["live_bytes"] == d["b"]["live_bytes"] > 0
    assert d["categories"] and all(c["delta"] == 0 for c in d["categories"])
