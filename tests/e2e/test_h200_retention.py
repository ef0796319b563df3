"""Why memory survives, on traces recorded on an H200 (scripts/gpu/retention_check.py runs
scripts/gpu/retention_scenarios.py; what each program said about itself is in TRUTH.json under
retain-*). Real DeepSpeed 0.19.8 (ZeRO-2, torch's AdamW), transformers 5.17, accelerate 1.15."""
import json
import re

import pytest

from conftest import GOLDEN, analyze, human

H200 = GOLDEN / "h200"
TRUTH = json.loads((H200 / "TRUTH.json").read_text())


def leaks(name, phase):
    return json.loads(analyze("leaks", "--json", "-q", "--phase", phase, "--top", "100", H200 / f"{name}.vrt").stdout)


def blamed(found):
    return [s for s in found["survivors"] if not s["persistent"]]


@pytest.fixture(scope="module")
def zero2():
    return leaks("retain-ds-zero2", "train")


def test_deepspeed_entries_equal_memory_allocated_so_the_walks_allocate_nothing(zero2):
    # The retention walk runs just before each entry is measured; had it touched device memory,
    # the tensor layer would differ from what PyTorch counted at the same moment.
    assert [p["live_bytes_at_entry"] for p in zero2["phases"]] == TRUTH["retain-ds-zero2"]["allocated_at_entry"]
    assert zero2["growth_per_invocation_bytes"] == TRUTH["retain-ds-zero2"]["growth_per_call"]


def test_deepspeed_every_survivor_is_held_through_the_users_model(zero2):
    # DeepSpeed keeps every engine alive (3 of 3 optimizers, as gc counted them) through the
    # forward hooks it registers on the model the user hands it: the chain must say so.
    assert TRUTH["retain-ds-zero2"]["zero_optimizers_alive"] == 3
    survivors = blamed(zero2)
    assert survivors and {s["held_by_status"] for s in survivors} == {"found"}
    for s in survivors:
        root = s["held_by"][0][0]
        assert root.startswith("__main__.MODEL."), s["held_by"]
    hooks = [s for s in survivors if s["held_by"][0][0].startswith("__main__.MODEL._forward_hooks[")]
    assert hooks and all("DeepSpeedEngine" in s["held_by"][0][0] for s in hooks)
    through_optimizer = sum(s["bytes"] for s in hooks if any(
        k in step for step in s["held_by"][0] for k in ("(DeepSpeedZeroOptimizer)", "(AdamW)")))
    assert through_optimizer >= 0.99 * sum(s["bytes"] for s in hooks)  # the rest: the engine's grad norm


def test_deepspeed_optimizer_state_is_named_by_identity(zero2):
    state = [s for s in blamed(zero2) if s["category"] == "optimizer_state"]
    assert state and {s["decided_by"] for s in state} == {"identity"}
    assert all(any(".state" in step for step in s["held_by"][0]) for s in state)


def test_oom_under_offload_is_activations_with_the_cap_named():
    truth = TRUTH["retain-ds-oom-offload"]
    oom = json.loads(analyze("oom", "--json", "-q", H200 / "retain-ds-oom-offload.vrt").stdout)["oom"]
    assert oom["tensor_bytes"] == truth["allocated"]
    assert oom["limit"]["kind"] == "per_process_cap" and oom["limit"]["allowed_bytes"] == truth["allowed"]
    assert oom["retention_walk"] is True
    cats = {c["name"]: c for c in oom["categories"]}
    first = oom["categories"][0]
    assert (first["name"], first["decided_by"]) == ("activations", "identity")
    # what the program counted itself at the failure, within the allocator's 512-byte rounding
    # of each of the 39 parameter tensors DeepSpeed flattened into one buffer
    assert 0 <= cats["parameters"]["bytes"] - truth["parameters"] <= 512 * 64
    assert cats["parameters"]["decided_by"] == "identity"
    assert cats["gradients"]["bytes"] == truth["optimizer_device"]  # the reduce bucket on the device
    host = {c["name"]: c["bytes"] for c in oom["host_categories"]}
    assert host.get("optimizer_state", 0) > 0


def test_kept_outputs_are_activations_held_by_the_list():
    truth = TRUTH["retain-hf-history"]
    found = leaks("retain-hf-history", "hf_train")
    logits = [s for s in blamed(found) if s["held_by"] and s["held_by"][0][-1].endswith(".logits (Tensor)")]
    assert sum(s["bytes"] for s in logits) == truth["history_logits_bytes"]
    assert all(s["held_by"][0][0].startswith("__main__.HISTORY[") for s in logits)
    assert {(s["category"], s["decided_by"]) for s in logits} == {("activations", "identity")}


def test_accelerate_prepare_keeps_each_calls_model_and_optimizer():
    truth = TRUTH["retain-accelerate"]
    found = leaks("retain-accelerate", "train_accelerate")
    held = [s for s in blamed(found) if s["held_by_status"] == "found"]
    assert held and all(s["held_by"][0][0] == "__main__.ACCELERATOR (Accelerator)" for s in held)
    index = re.compile(r"^\._(models|optimizers)\[(\d+)\]")
    kept = {index.match(step).groups() for s in held for step in s["held_by"][0] if index.match(step)}
    models = {i for kind, i in kept if kind == "models"}
    optimizers = {i for kind, i in kept if kind == "optimizers"}
    assert 0 < len(optimizers) <= truth["accelerator_optimizers"] and len(models) <= truth["accelerator_models"]


def test_an_attached_job_names_the_line_that_grows_per_step():
    """attach-grow.vrt: the on-call case (issue 19). scripts/gpu/attach_grow.py keeps one 8 MiB
    tensor per step in a module-level list; vramtrace attached to it 6 s after it started (its
    loop had run about 16 steps) and it ran to its end, its teardown freeing the list."""
    truth = TRUTH["attach-grow"]
    d = json.loads(analyze("leaks", "--json", "-q", H200 / "attach-grow.vrt").stdout)
    assert d["phase"] is None and d["teardown_s"] is not None and d["layer"] == "tensors"
    top = d["growing"][0]
    python = [f for f in top["frames"] if f.get("line")]
    assert (python[0]["file"].rsplit("/", 1)[-1], python[0]["line"]) == (truth["file"], truth["grow_line"])
    assert top["category"] == "user_tensors" and top["bytes_per_step"] == truth["grow_bytes_per_step"]
    assert truth["steps"] - 30 < top["steps"] < truth["steps"]  # the steps after the attach
    assert d["summary"].startswith("+8.00 MiB per step (%d steps" % top["steps"])
    assert d["summary"].endswith("100%% from main (attach_grow.py:%d)" % truth["grow_line"])
    # nothing that is a tensor is called cache: the only other rising line is the cache itself
    assert all(g["category"] == "allocator_cache" for g in d["growing"][1:])


def test_an_attached_deepspeed_job_names_what_grows_to_the_byte():
    """attach-ds.vrt: real DeepSpeed ZeRO-2 re-initialized in each of 12 train() calls on one
    model, started untraced; vramtrace attached during its fifth call, and it ran to its end. What
    the job held before the attach is PyTorch's own count at that call's end; every site leaks
    names grows once per call, and together they are the job's growth over the seven whole calls
    traced, to the byte; at the end the trace's tensors are memory_allocated()."""
    truth = TRUTH["attach-ds"]
    traced_calls = truth["calls"] - truth["calls_begun_before_the_attach_ended"]
    d = json.loads(analyze("leaks", "--json", "-q", H200 / "attach-ds.vrt").stdout)
    assert d["phase"] is None and d["layer"] == "tensors" and d["teardown_s"] is not None
    assert sum(g["bytes"] for g in d["growing"]) == traced_calls * truth["growth_per_call"]
    top = d["growing"][0]
    assert top["headline"]["function"] == "DeepSpeedZeroOptimizer.setup_buckets" and top["category"] == "gradients"
    assert all(g["count"] % traced_calls == 0 for g in d["growing"])
    assert not any(g["category"] == "allocator_cache" for g in d["growing"])
    # A call is a step: its survivors come once per call, whatever it allocates and frees.
    assert top["steps"] == traced_calls
    assert d["summary"].startswith("+%s per step (%d steps, one every " % (
        human(truth["growth_per_call"]), traced_calls))
    r = json.loads(analyze("report", "--json", "-q", H200 / "attach-ds.vrt").stdout)
    assert r["tensors"][0]["live_bytes_at_end"] == truth["allocated_at_end"]
    before = sum(s["bytes"] for s in r["live_at_end"]
                 if s.get("headline", {}).get("function") == "[tensor allocated before attach]")
    assert before == truth["allocated_at_entry"][truth["calls_begun_before_the_attach_ended"]]


def test_deepspeed_what_keeps_it_alive_is_one_root_the_models_forward_hooks(zero2):
    # The answer to "how do I free what DeepSpeed keeps?": the hooks DeepSpeed registered on the
    # user's model hold nearly everything that survives, whichever of the 48 hooks each chain takes.
    top = zero2["kept_alive_by"][0]
    assert top["root"] == ("__main__.MODEL._forward_hooks[*] (function DeepSpeedEngine._create_module_forward_post_hook"
                           ".<locals>._module_forward_post_hook)")
    explained = sum(zero2["kept_alive_by_status"].values())
    assert explained == sum(p["survivor_bytes"] for p in zero2["phases"])
    assert top["bytes"] >= 0.9 * explained


@pytest.mark.parametrize("name,phase", [("retain-hf-history", "hf_train"), ("retain-ds-zero2", "train")])
def test_the_headline_splits_what_the_later_calls_left(name, phase):
    """The headline's figure is the growth from the second call on; its shares split the
    survivors of those calls. What only the first call left (the optimizer state AdamW builds at
    its first step, line 189 of the hf-history program) is no part of it."""
    found = leaks(name, phase)
    later = [s for s in blamed(found) if s["phase_index"] >= 2]
    first_only = [s for s in blamed(found) if s["phase_index"] == 1 and s["verdict"].startswith("one-time")]
    by_line = {}
    for s in later:
        h = s["headline"]
        key = "%s:%d" % (h["file"].rsplit("/", 1)[-1], h["line"])
        by_line[key] = by_line.get(key, 0) + s["bytes"]
    line, top = max(by_line.items(), key=lambda kv: kv[1])
    share = re.match(r"^\+[^:]+: (\d+)% from [^(]*\(([^,)]+)", found["summary"])
    assert share, found["summary"]
    assert share[2] == line
    assert int(share[1]) == round(100 * top / sum(by_line.values()))
    if name == "retain-hf-history":
        assert first_only and {s["headline"]["line"] for s in first_only} == {189}
        assert ":189" not in found["summary"] and int(share[1]) == 100
        # "in": where the library made the largest of them, the logits (lm_head's Linear; 96 MiB
        # a call against the KV cache's 48)
        assert found["summary"].endswith(", in linear.py:134)")


def test_a_call_the_trace_ends_in_is_not_a_per_call_figure(tmp_path):
    """leak-cycle.vrt cut after its first chunks (a trace copied while the job ran, or cut short):
    its one train() call had not returned. The table says so instead of a "live at exit", and
    the headline gives what it held so far, not a figure per call."""
    cut = tmp_path / "cut.vrt"
    cut.write_bytes((GOLDEN / "h200" / "leak-cycle.vrt").read_bytes()[:20000])
    d = json.loads(analyze("leaks", "--json", "-q", "--phase", "train", cut).stdout)
    assert [p["returned"] for p in d["phases"]] == [False]
    assert re.match(r"^\+[\d.]+ MiB so far in the only train\(\) call \(it had not returned where the trace ends\): ",
                    d["summary"]), d["summary"]
    text = analyze("leaks", "-q", "--phase", "train", cut).stdout.splitlines()
    assert text[0].endswith("(1 invocation; tensors)") and "(running)" in text[3]
    whole = leaks("leak-cycle", "train")
    assert all(p["returned"] for p in whole["phases"]) and "so far" not in whole["summary"]


def test_a_loss_kept_with_its_history_is_named_through_its_autograd_graph():
    """scripts/gpu/graph_retention_check.py on an H100: each call keeps its loss (and with it the
    graph's saved activations), a new Adam, and a forward hook's output. The graph's activations
    are named from the list that keeps the losses (their Python tensors live on in C++, their
    grad_fn the node the graph reaches); the inputs the graph saved, leaves without a grad_fn,
    stay "held by native code"; cuBLAS's workspaces (first call, two handles) are labelled."""
    truth = TRUTH["graph-retained"]
    out = json.loads(analyze("leaks", "--json", "-q", "--phase", "train", H200 / "graph-retained.vrt").stdout)
    assert [p["live_bytes_at_entry"] for p in out["phases"]] == truth["allocated_at_entry"]
    roots = {k["root"]: k["bytes"] for k in out["kept_alive_by"]}
    kept = truth["kept_per_call"]
    assert roots["__main__.LOSSES[*] (Tensor)"] >= 3 * (kept["graph_relu_output"] + kept["graph_linear_output"])
    assert roots["__main__.OPTIMIZERS[*] (Adam)"] == 3 * (kept["adam_exp_avg"] + kept["adam_exp_avg_sq"])
    chains = {" -> ".join(c) for s in out["survivors"] for c in s["held_by"]}
    assert "__main__.LOSSES[0] (Tensor) -> .grad_fn graph: ReluBackward0's output (Tensor)" in chains
    assert "__main__.LOSSES[0] (Tensor) -> .grad_fn graph: AddmmBackward0's output (Tensor)" in chains
    workspaces = [s for s in out["survivors"] if s["category"] == "workspace"]
    assert workspaces and all(s["persistent"] and s["phase_index"] == 1 for s in workspaces)
    text = analyze("leaks", "-q", "--phase", "train", H200 / "graph-retained.vrt").stdout
    assert "persistent by design, labelled and not blamed: 65.0 MiB (cuBLAS/cuDNN workspaces 65.0 MiB" in text


def test_oom_says_what_holds_the_device_memory_at_the_failure():
    """With a retention walk at the failure (ZeRO-2 with offload, a cap hit in forward), `oom`
    says where the chains that hold the device's memory start, as `leaks` does for survivors:
    every byte it sorts into categories (the allocator's cache aside) is counted once, by what
    the walk said of it."""
    trace = GOLDEN / "h200" / "retain-ds-oom-offload.vrt"
    text = analyze("oom", "-q", trace).stdout
    heading = "kept alive by (what the retention walk at the failure found holding the device's memory):"
    assert heading in text
    roots = text.split(heading)[1].split("\n\n")[0].splitlines()
    assert any(r.split()[:2] == ["448", "MiB"] and "past_key_values (DynamicCache)  (14 objects)" in r for r in roots), roots
    out = json.loads(analyze("oom", "-q", "--json", trace).stdout)["oom"]
    by_status = out["kept_alive_by_status"]
    assert sum(by_status.values()) == sum(c["bytes"] for c in out["categories"] if c["name"] != "allocator_cache")
    assert sum(r["bytes"] for r in out["kept_alive_by"]) + out["kept_alive_other_roots_bytes"] == \
        by_status["found"] + by_status["unreachable"] - sum(out["kept_alive_without_chain"][k] for k in ("found", "unreachable"))


def test_report_says_what_holds_the_memory_live_at_the_end():
    """Story 1's job (a train() per sample under ZeRO-2): `report` says, under what is live at
    the end, where the last walk's chains start: the engine's forward hooks on the user's model,
    every byte it sorts into categories counted once (the allocator's cache aside)."""
    trace = H200 / "retain-ds-zero2.vrt"
    text = analyze("report", "-q", trace).stdout
    held = text.split("kept alive by (what that walk found holding it):\n")[1].split("\n\n")[0].splitlines()
    assert held[0].split()[:3] == ["1.26", "GiB", "36%"], held
    assert held[0].endswith("__main__.MODEL._forward_hooks[*] (function DeepSpeedEngine._create_module_forward_post_hook"
                            ".<locals>._module_forward_post_hook)  (7 objects)"), held
    # what no walk asked about is said too: the shares add up
    assert held[-1].split()[:3] == ["2.15", "GiB", "62%"] and held[-1].endswith("not asked about (born before the "
                                                                               "walk's window, or no walk since its birth)")
    out = json.loads(analyze("report", "-q", "--json", trace).stdout)
    [device0] = out["kept_alive_at_end"]
    assert device0["device"] == 0
    assert sum(device0["kept_alive_by_status"].values()) == sum(
        c["bytes"] for c in out["categories_at_end"] if c["device"] == 0 and c["name"] != "allocator_cache")


def test_oom_after_a_retry_inside_the_except_block_names_the_exception():
    """Recorded on an H100 (scripts/gpu/retry_oom_check.py): a step runs out of its 6 GiB cap,
    the handler retries with half the batch before its block ends, and runs out again. At the
    second failure the exception being handled keeps the first step's input and activations,
    and `oom` says so first, with where the handler runs."""
    truth = json.loads((H200 / "TRUTH.json").read_text())["retry-oom"]
    out = json.loads(analyze("oom", "-q", "--json", H200 / "retry-oom.vrt").stdout)["oom"]
    assert out["kept_alive_by"][0] == {
        "root": "exception being handled in <module> at job.py:%d (OutOfMemoryError)" % truth["retry_line"],
        "bytes": truth["held_by_failed_attempt"], "objects": 5}
