"""Why memory survives, in the other shapes the bug takes: tests/programs/retain_shapes.py keeps a
buffer a call in thirteen ways (an lru_cache, an exception's traceback, a suspended generator, a
threading.local, a class attribute, a default argument, an attribute on an object, another
thread's local, a functools.partial's argument, a set, a named tuple's field, one line reached
through two native paths) and sets one workspace up once.
`leaks` must name each holder the way its user would write it, list a line once whatever native
path reached it, and blame a workspace that grows every call while labelling one set up once.
Run by this interpreter, and the chains again by every CPython the machine has (3.9-3.14).
"""
import json
import sys

import pytest

from conftest import CUDART, GOLDEN, PROGRAM_SOURCES, SOURCE, MiB, analyze, program, program_constant, trace as traced
from conftest import kept_line as program_kept_line
from test_python_versions import FOUND, MINORS

SCRIPT = PROGRAM_SOURCES / "retain_shapes.py"
CALLS = 3
LINES = SCRIPT.read_text().splitlines()
KEPT_MIB = program_constant(SCRIPT, "KEPT")
ONCE_MIB = program_constant(SCRIPT, "ONCE")
LIBRARY_MIB = program_constant(SCRIPT, "LIBRARY")


def line_of(text):
    return next(n for n, line in enumerate(LINES, 1) if text in line)


def kept_line(way):
    return program_kept_line(SCRIPT, way)


def expected_chains(minor):
    """The first call's survivor of each way, as leaks --json names it (steps joined by ->)."""
    thread = "Thread-1 (worker)" if minor >= 10 else "Thread-1"
    raised = line_of("raise LyingError(tmp.nbytes)")
    yielded = line_of("    yield 1")
    waiting = line_of("STOP.wait()")
    return {
        "lru": "__main__.cached_workspace (lru_cache of cached_workspace) -> cache[0] (DeviceBuffer)",
        # 3.9's bounded cache does not show its entries' keys beside their results
        "bounded": "__main__.bounded_buffer (lru_cache of bounded_buffer) -> cache%s (DeviceBuffer)"
                   % ("[0]" if minor >= 10 else ""),
        "traceback": "__main__.ERRORS[0] (LyingError) -> .__traceback__.tb_next, in failing_step at "
                     f"retain_shapes.py:{raised}: local tmp (DeviceBuffer)",
        "generator": f"__main__.GENERATORS[0] (generator suspended at retain_shapes.py:{yielded}) -> local held "
                     "(DeviceBuffer)",
        "threadlocal": "__main__.PER_THREAD (_local) -> .buffers[0] (DeviceBuffer)",
        "default": "__main__.with_default (function with_default) -> default argument _memo[0] (DeviceBuffer)",
        "classattr": "__main__.Model (type) -> .cache[0] (DeviceBuffer)",
        "attribute": "__main__.PARAMS[0] (Tagged) -> .ds_extra[0] (DeviceBuffer)",
        "thread": f"thread {thread}: worker (retain_shapes.py:{waiting}): local_buf (DeviceBuffer)",
        "twopaths": "__main__.TWO_PATHS[0] (DeviceBuffer)",
        "partial": "__main__.CALLBACKS[0] (partial) -> .args[0] (DeviceBuffer)",
        "set": "__main__.SEEN member (DeviceBuffer)",
        "namedtuple": "__main__.PAIRS[0].first (DeviceBuffer)",
    }


def allocated_at(survivor, line, program="retain_shapes.py"):
    return any(f.get("file", "").endswith(program) and f.get("line") == line for f in survivor["frames"])


def of_way(survivors, way):
    line = kept_line(way)
    return [s for s in survivors if allocated_at(s, line)]


def run_leaks(tmp_path, exe):
    t = traced(tmp_path, [exe, SCRIPT, CALLS, program("libpyalloc_lib.so")], env={"CUDART": str(CUDART)},
               run_args=("--phase", "train"))
    assert t.returncode == 0, t.stderr
    out = json.loads(analyze("leaks", "--json", "--quiet", "--phase", "train", t.trace).stdout)
    text = analyze("leaks", "--quiet", "--phase", "train", "--top", "50", t.trace).stdout
    return t, out, text


@pytest.fixture(scope="module")
def run(tmp_path_factory, python_exe):
    return run_leaks(tmp_path_factory.mktemp("shapes"), python_exe)


def chains_of_first_call(out, way):
    first = [s for s in of_way(out["survivors"], way) if s["phase_index"] == 1]
    assert len(first) == 1, (way, first)
    return [" -> ".join(chain) for chain in first[0]["held_by"]]


@pytest.mark.parametrize("way", sorted(expected_chains(11)))
def test_each_way_of_keeping_is_named_as_its_user_would_write_it(run, way):
    import sys

    _, out, _ = run
    assert chains_of_first_call(out, way) == [expected_chains(sys.version_info[1])[way]]


@pytest.mark.parametrize("way", sorted(expected_chains(11)))
def test_each_way_grows_every_call_by_what_the_program_keeps(run, way):
    _, out, _ = run
    groups = of_way(out["survivors"], way)
    calls = {s["phase_index"] for s in groups}
    # the last call's thread is let go before teardown: the others outlive their call
    assert calls == ({1, 2} if way == "thread" else {1, 2, 3}), (way, groups)
    assert all(s["bytes"] == KEPT_MIB[way] * MiB for s in groups)
    assert all(s["verdict"] == "grows every call" and not s["persistent"] for s in groups), groups


def test_one_line_reached_through_two_native_paths_is_one_site(run):
    """The first call allocates directly, the later ones through functools.partial (C frames
    between the same Python frames): the text lists the line once, born in calls 1..3."""
    _, out, text = run
    groups = of_way(out["survivors"], "twopaths")
    assert len({s["stack"] for s in groups}) >= 2, "the program no longer reaches the line two ways"
    line = f"retain_shapes.py:{kept_line('twopaths')})"
    listed = [i for i, row in enumerate(text.splitlines()) if row.strip().startswith("at allocate (") and line in row]
    assert len(listed) == 1, text
    # 9 MiB in the first call, 18 in each later one (both paths): a call counts once
    born = next(row for row in text.splitlines()[listed[0]:] if "born in" in row)
    assert "born in calls 1..3, 15.0 MiB a call, grows every call" in born, text


def test_a_workspace_set_up_once_is_labelled_and_one_that_grows_is_blamed(run):
    _, out, text = run
    once = [s for s in out["survivors"] if allocated_at(s, line_of("# once: workspace"))]
    assert [(s["phase_index"], s["bytes"], s["persistent"], s["verdict"]) for s in once] == \
        [(1, ONCE_MIB * MiB, True, "persistent by design")]
    assert "persistent by design, labelled and not blamed: 21.0 MiB (cuBLAS/cuDNN workspaces 21.0 MiB" in text
    growing = [row for row in text.splitlines() if "grows every call" in row and "set up once by design" in row]
    assert len(growing) == 1, text  # cached_workspace(i): one more each call
    # between the second and third calls' entries: the second call went both ways, and kept a
    # library's buffer
    assert out["growth_per_invocation_bytes"] == (sum(KEPT_MIB.values()) + KEPT_MIB["twopaths"] + LIBRARY_MIB) * MiB


def test_stacks_that_print_alike_but_are_different_things_are_two_sites(run):
    """One line: in the first call a library sets its workspace up (a frame names cuBLAS's
    workspace), in the later ones it hands out plain buffers. The Python frames are the same;
    what each is is not: the workspace is labelled set up once, the rest grows every call."""
    _, out, text = run
    groups = sorted(of_way(out["survivors"], "library"), key=lambda s: s["phase_index"])
    assert [(s["phase_index"], s["bytes"], s["persistent"], s["verdict"], s["category"]) for s in groups] == [
        (1, LIBRARY_MIB * MiB, True, "persistent by design", "workspace"),
        (2, LIBRARY_MIB * MiB, False, "grows every call", "non_pytorch"),
        (3, LIBRARY_MIB * MiB, False, "grows every call", "non_pytorch")]
    born = [row for row in text.splitlines() if "born in calls 2..3, 11.0 MiB a call, grows every call" in row]
    assert len(born) == 1, text


@pytest.mark.parametrize("minor", MINORS, ids=[f"3.{m}" for m in MINORS])
def test_the_chains_on_each_version(tmp_path, minor):
    exe = FOUND.get(minor)
    if not exe:
        pytest.skip(f"no CPython 3.{minor} here (pyenv, python3.{minor} on PATH, VRAMTRACE_TEST_PYTHONS)")
    _, out, text = run_leaks(tmp_path, exe)
    want = expected_chains(minor)
    assert {way: chains_of_first_call(out, way) for way in want} == {way: [c] for way, c in want.items()}
    assert len({s["stack"] for s in of_way(out["survivors"], "twopaths")}) >= 2  # 3.13 specializes: 3
    assert "15.0 MiB a call, grows every call" in text


# ---- the same shapes on PyTorch, recorded on a GPU (scripts/gpu/retention_shapes_check.py) ----

def gpu_script(name):
    """scripts/gpu/NAME.py as a module (its jobs' texts, WANT tables and helpers)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, SOURCE / "scripts" / "gpu" / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_check():
    return gpu_script("retention_shapes_check")


@pytest.mark.parametrize("name", ["retain-shapes", "retain-shapes-nccl"])
def test_the_shapes_on_pytorch_are_named_and_their_entries_are_memory_allocated(name):
    """Tensors, not ctypes buffers: the first call's survivor of each way has its chain, each
    call's entry equals torch.cuda.memory_allocated() as the job printed it."""
    check = gpu_check()
    truth = json.loads((GOLDEN / "h200" / "TRUTH.json").read_text())[name]
    out = json.loads(analyze("leaks", "--json", "-q", "--phase", "train", GOLDEN / "h200" / f"{name}.vrt").stdout)
    assert out["layer"] == "tensors"
    assert [p["live_bytes_at_entry"] for p in out["phases"]] == truth["allocated_at_entry"]
    job = check.JOB % {"kept": check.KEPT, "nccl": name.endswith("nccl")}
    for way, chain in check.expected(job, int(truth["python"].split(".")[1])).items():
        groups = check.kept_at(out, job, way)
        assert [" -> ".join(c) for s in groups if s["phase_index"] == 1 for c in s["held_by"]] == [chain], way
        assert {s["verdict"] for s in groups} == {"grows every call"}, way


def test_a_new_nccl_communicator_each_call_is_blamed_not_labelled_set_up_once():
    """A one-rank group made and used in every call: NCCL's buffers (the CUDA layer) grow by
    hundreds of MiB a call. They are NCCL's kind, set up once by design in a sane job; here they
    are the leak, and the headline names the user's line that makes them."""
    name = GOLDEN / "h200" / "retain-shapes-nccl.vrt"
    out = json.loads(analyze("leaks", "--json", "-q", "--phase", "train", "--layer", "cuda", name).stdout)
    nccl = [s for s in out["survivors"] if s["category"] == "nccl"]
    assert {s["phase_index"] for s in nccl} == {1, 2, 3}
    assert all(not s["persistent"] and s["verdict"] == "grows every call" for s in nccl)
    assert sum(s["bytes"] for s in nccl) > out["growth_per_invocation_bytes"] * 2
    text = analyze("leaks", "-q", "--phase", "train", "--layer", "cuda", name).stdout
    headline = next(row for row in text.splitlines() if row.startswith("+"))
    assert "per train() call: 8" in headline and "(job.py:81, in distributed_c10d.py" in headline, text
    assert not any("persistent by design" in row and "NCCL" in row for row in text.splitlines()), text


def test_without_phases_a_line_reached_two_ways_is_listed_once(tmp_path, python_exe):
    """leaks without phases (growth across the low points) lists what grows as it prints too."""
    t = traced(tmp_path, [python_exe, SCRIPT, 8], env={"CUDART": str(CUDART)})
    assert t.returncode == 0, t.stderr
    text = analyze("leaks", "-q", "--top", "50", t.trace).stdout
    line = f"retain_shapes.py:{kept_line('twopaths')})"
    listed = [row for row in text.splitlines() if row.strip().startswith("at allocate (") and row.endswith(line)]
    assert len(listed) == 1, text
    out = json.loads(analyze("leaks", "--json", "-q", t.trace).stdout)
    assert out["summary"].startswith("+"), out["summary"]


def test_report_lists_a_line_reached_two_ways_once_and_its_json_each_stack(run):
    """report's text reads as lines, as leaks': the line's buffers, whichever native path made
    them, are one site at the end and at the peak (9 MiB in the first call, 18 in each later
    one); --json keeps each stack."""
    t, _, _ = run
    text = analyze("report", "-q", "--top", "50", t.trace).stdout
    line = f"at allocate ({SCRIPT}:{kept_line('twopaths')})"
    at_end, _, at_peak = text.partition("top sites at the peak")
    for part in (at_end, at_peak):
        rows = part.splitlines()
        listed = [i for i, row in enumerate(rows) if row.strip() == line]
        assert len(listed) == 1, part
        assert rows[listed[0] - 1].split()[:3] == ["45.0", "MiB", "5x"], part
    stacks = json.loads(analyze("report", "--json", "-q", "--top", "50", t.trace).stdout)["live_at_end"]
    assert len([s for s in stacks if allocated_at(s, kept_line("twopaths"))]) >= 2


def test_oom_lists_a_line_reached_two_ways_once(tmp_path, python_exe):
    """The same at an OOM (the device made 300 MiB: the third call fails): what fills memory
    lists the line once; --json keeps each stack."""
    t = traced(tmp_path, [python_exe, SCRIPT, CALLS, program("libpyalloc_lib.so")],
               env={"CUDART": str(CUDART), "FAKECUDA_TOTAL_BYTES": str(300 * MiB)}, run_args=("--phase", "train"))
    assert "MemoryError" in t.stderr
    rows = analyze("oom", "-q", "--top", "50", t.trace).stdout.splitlines()
    listed = [i for i, row in enumerate(rows) if row.strip() == f"at allocate ({SCRIPT}:{kept_line('twopaths')})"]
    assert len(listed) == 1, rows
    assert rows[listed[0] - 1].split()[:3] == ["45.0", "MiB", "5x"], rows


def test_html_lists_a_line_reached_two_ways_as_one_site(run, tmp_path):
    """The page's charts and tables read as lines too: one site for the line, its bytes the
    two paths' together (45 MiB at the peak, in 5 buffers)."""
    from test_html import page_data

    t, _, _ = run
    page = tmp_path / "shapes.html"
    analyze("html", "-q", t.trace, "-o", page)
    data = page_data(page)
    line = f"retain_shapes.py:{kept_line('twopaths')}"
    sites = [i for i, s in enumerate(data["sites"]) if any(line in str(data["frames"][f]) for f in s["frames"])]
    assert len(sites) == 1, sites
    [series] = data["series"]
    assert series["site_peak"][series["sites"].index(sites[0])][::2] == [45 * MiB, 5], series
    # the leaks table too: one row, born in calls 1..3 (9 MiB in the first, 18 in each later one)
    rows = [r for r in data["leaks"]["survivors"]
            if any(f["file"].endswith("retain_shapes.py") and f["line"] == kept_line("twopaths") for f in r["frames"])]
    assert [(r["bytes"], r["calls"], r["first_call"], r["last_call"]) for r in rows] == [(45 * MiB, 3, 1, 3)], rows


STREAMS = PROGRAM_SOURCES / "stream_workspace.py"


@pytest.mark.parametrize("mode", ["", "--two-streams", "--also-shared"])
def test_a_workspace_that_grows_because_each_call_makes_a_stream_says_so(tmp_path, python_exe, mode):
    """stream_workspace.py keeps a workspace per stream (as PyTorch keeps a cuBLAS workspace for
    every stream a matmul ran on) and makes a new stream in each of 4 calls: the workspace site
    grows every call, and leaks says why (each call's on a new stream: make the stream once)
    instead of only wondering whether a new one is made each call. With two streams made once and
    taken in turn (its workspace grows for another reason), or a workspace each call on a stream
    made once besides the new stream's, the text does not blame streams."""
    t = traced(tmp_path, [python_exe, STREAMS, CUDART, 4, *([mode] if mode else [])], run_args=("--phase", "train"))
    assert t.returncode == 0 and t.stdout.split()[:2] == ["streams", {"": "4", "--two-streams": "2"}.get(mode, "5")], \
        (t.stdout, t.stderr)
    streams_to_blame = not mode
    out = json.loads(analyze("leaks", "--json", "--quiet", "--phase", "train", t.trace).stdout)
    kept = [s for s in out["survivors"] if allocated_at(s, program_kept_line(STREAMS, "workspace"), STREAMS.name)]
    assert sorted({s["phase_index"] for s in kept}) == [1, 2, 3, 4], out["survivors"]
    assert {s["streams_one_a_call"] for s in kept} == {4 if streams_to_blame else 0}, kept
    assert all(s["verdict"] == "grows every call" and not s["persistent"] for s in kept), kept
    text = analyze("leaks", "--quiet", "--phase", "train", t.trace).stdout
    born = next(row for row in text.splitlines() if "born in calls 1..4" in row)
    if streams_to_blame:
        assert "3.00 MiB a call on 4 streams, grows every call" in born, text
        assert "each call's on a new stream" in born and "make the stream once" in born, text
    else:
        assert "stream" not in born and "a new one each call?" in born, text


VIEW = PROGRAM_SOURCES / "retain_view.py"


def test_a_small_slice_kept_of_a_big_tensor_says_it_keeps_the_whole_storage(tmp_path, python_exe):
    """retain_view.py keeps a 16-byte slice of an 8 MiB tensor each call (and a whole 2 MiB one):
    the slice's chain says it is a view that keeps all 8 MiB, so the surprise (a few bytes kept,
    megabytes held) is read off the line; the whole tensor's says nothing more. PyTorch stood in
    for by the little of it the walk reads (the program's own `torch`)."""
    t = traced(tmp_path, [python_exe, VIEW, 3], env={"CUDART": str(CUDART)}, run_args=("--phase", "train"))
    assert t.returncode == 0 and t.stdout.strip() == "kept 3", t.stderr
    out = json.loads(analyze("leaks", "--json", "--quiet", "--phase", "train", t.trace).stdout)

    def chains(way):
        first = [s for s in out["survivors"]
                 if s["phase_index"] == 1 and allocated_at(s, program_kept_line(VIEW, way), VIEW.name)]
        return [" -> ".join(c) for s in first for c in s["held_by"]]

    assert chains("view") == ["__main__.VIEWS[0] (Tensor, a view of 16 B that keeps all 8.00 MiB)"]
    assert chains("whole") == ["__main__.WHOLES[0] (Tensor)"]
    roots = {r["root"]: r["bytes"] for r in out["kept_alive_by"]}
    assert roots.get("__main__.VIEWS[*] (Tensor, a view of 16 B that keeps all 8.00 MiB)") == 24 * MiB, roots


@pytest.mark.parametrize("n, text", [(0, "0 B"), (16, "16 B"), (1023, "1023 B"), (1024, "1.00 KiB"),
                                     (8 * MiB + 10 * 1024, "8.01 MiB"), (64 * MiB, "64.0 MiB"), (233 * MiB, "233 MiB"),
                                     (1000 * MiB, "1000 MiB"), (1024 * MiB, "1.00 GiB"), (1 << 50, "1024 TiB")])
def test_the_walks_print_bytes_as_the_reports_do(n, text):
    """The chains' sizes (a view's note) read as the analyzer's figures beside them
    (vrt_fmt_bytes: two decimals under 10, one under 100, none above; units to TiB)."""
    import sys

    sys.path.insert(0, str(SOURCE / "python"))
    from vramtrace._chains import bytes_text

    assert bytes_text(n) == text


def test_on_pytorch_a_stream_made_each_call_is_said_of_its_cublas_workspace():
    """tests/golden/h200/torch-more.vrt (an H100, scripts/gpu/torch_more_shapes.py): each call runs
    a forward pass on a torch.cuda.Stream() it makes, and PyTorch keeps a cuBLAS workspace (and a
    cuBLASLt one) for every stream: 33 MiB more each call. The tensors left at that line are
    workspaces on a new stream each call, and leaks says so; the workspaces of the default stream
    and of graph capture's stream (set up once) stay labelled, streams not blamed."""
    job = gpu_script("torch_more_shapes")
    trace = GOLDEN / "h200" / "torch-more.vrt"
    truth = json.loads((GOLDEN / "h200" / "TRUTH.json").read_text())["torch-more"]
    out = json.loads(analyze("leaks", "--json", "-q", "--phase", "train", trace).stdout)
    assert out["layer"] == "tensors"
    assert [p["live_bytes_at_entry"] for p in out["phases"]] == truth["allocated_at_entry"]

    check = gpu_check()
    stream = check.kept_at(out, job.JOB, "stream")
    assert {s["category"] for s in stream} == {"workspace"} and {s["phase_index"] for s in stream} == {1, 2, 3, 4}
    assert {(s["streams_one_a_call"], s["verdict"], s["persistent"]) for s in stream} == {(4, "grows every call", False)}
    assert sum(s["bytes"] for s in stream) == 4 * 33 * MiB
    graph = [s for s in check.kept_at(out, job.JOB, "graph") if s["category"] == "workspace"]
    assert graph and {(s["streams_one_a_call"], s["persistent"]) for s in graph} == {(0, True)}, graph
    text = analyze("leaks", "-q", "--phase", "train", trace).stdout
    assert "born in calls 1..4, 33.0 MiB a call on 4 streams, grows every call (leaves memory behind in every " \
           "invocation, each call's on a new stream" in text, text


@pytest.mark.parametrize("other_thread", [False, True], ids=["same-thread", "other-thread"])
def test_memory_made_for_a_cuda_graph_captured_each_call_says_so(tmp_path, other_thread):
    """tests/programs/graph_pool.py captures a graph each call and keeps what it allocated while
    capturing (PyTorch: the graph's private pool, alive as long as the graph), and 2 MiB a call
    allocated outside the capture. leaks says the first is made for a CUDA graph, not the second;
    nor memory another thread allocated while the capture was open (--other-thread)."""
    argv = [sys.executable, PROGRAM_SOURCES / "graph_pool.py", CUDART, 4] + (["--other-thread"] if other_thread else [])
    t = traced(tmp_path, argv, run_args=("--phase", "train"))
    assert (t.returncode, t.stdout) == (0, "graph_pool: 4 calls\n"), t.stderr
    out = json.loads(analyze("leaks", "--json", "-q", "--phase", "train", t.trace).stdout)
    graph = [s for s in out["survivors"] if s["bytes"] == 6 * MiB]
    result = [s for s in out["survivors"] if s["bytes"] == 2 * MiB]
    assert [(s["phase_index"], s["captured_bytes"]) for s in graph] == [(i, 6 * MiB) for i in range(1, 5)], graph
    assert [(s["phase_index"], s["captured_bytes"]) for s in result] == [(i, 0) for i in range(1, 5)], result
    text = analyze("leaks", "-q", "--phase", "train", t.trace).stdout
    assert text.count("made for a CUDA graph: allocated while its thread captured one") == 1, text
    graph_site = text[text.index("24.0 MiB      4x"):]
    assert graph_site.index("made for a CUDA graph") < graph_site.index("8.00 MiB      4x"), text
    dump = analyze("dump", "-q", t.trace).stdout
    assert dump.count("capture_begin cudaStreamBeginCapture") == 4 and dump.count("capture_end  cudaStreamEndCapture") == 4


def test_on_pytorch_a_cuda_graph_captured_each_call_is_said_of_its_pool():
    """tests/golden/h200/graph-pool.vrt (an H100, scripts/gpu/graph_pool_check.py): each call
    captures a torch.cuda.graph of a forward pass and keeps the graph, and keeps a 2 MiB tensor
    made outside the capture. PyTorch began each capture through the shared runtime (a
    CAPTURE_BEGIN and CAPTURE_END a call); the segments the captures allocated (20 MiB a call)
    are made for a graph and leaks says so; the tensors made outside are not."""
    check = gpu_script("graph_pool_check")
    job = check.JOB % {"calls": check.CALLS}
    trace = GOLDEN / "h200" / "graph-pool.vrt"
    truth = json.loads((GOLDEN / "h200" / "TRUTH.json").read_text())["graph-pool"]
    dump = analyze("dump", "-q", trace).stdout
    assert dump.count(" capture_begin cudaStreamBeginCapture ") == 4 and dump.count(" capture_end  cudaStreamEndCapture ") == 4
    tensors = json.loads(analyze("leaks", "--json", "-q", "--phase", "train", trace).stdout)
    assert [p["live_bytes_at_entry"] for p in tensors["phases"]] == truth["allocated_at_entry"]
    result = check.kept_at(tensors, job, "result")
    assert [(s["phase_index"], s["bytes"], s["captured_bytes"]) for s in result] == [(i, 2 * MiB, 0) for i in range(1, 5)]
    cuda = json.loads(analyze("leaks", "--json", "-q", "--phase", "train", "--layer", "cuda", trace).stdout)
    graph = check.kept_at(cuda, job, "graph")
    assert {s["phase_index"] for s in graph} == {1, 2, 3, 4}
    assert all(s["captured_bytes"] == s["bytes"] for s in graph), graph
    assert [sum(s["bytes"] for s in graph if s["phase_index"] == k) for k in (2, 3, 4)] == [20 * MiB] * 3
    assert sum(s["captured_bytes"] for s in cuda["survivors"]) == sum(s["bytes"] for s in graph), cuda["survivors"]
    text = analyze("leaks", "-q", "--phase", "train", "--layer", "cuda", trace).stdout
    assert "born in calls 1..4, 20.0 MiB a call, grows every call (leaves memory behind in every invocation)\n" \
           "                         made for a CUDA graph: allocated while its thread captured one" in text, text


def test_on_pytorch_a_small_view_and_a_stream_made_each_call_read_as_on_the_double():
    """tests/golden/h200/view-stream.vrt (an H100, scripts/gpu/view_stream_check.py): a 16-byte
    slice kept of a 64 MiB tensor made each call says it keeps the whole storage; a whole tensor
    kept says nothing more; a matmul on a stream made each call grows a cuBLAS workspace each
    call, on a new stream each time."""
    check = gpu_script("view_stream_check")
    job = check.JOB % {"calls": check.CALLS}
    trace = GOLDEN / "h200" / "view-stream.vrt"
    truth = json.loads((GOLDEN / "h200" / "TRUTH.json").read_text())["view-stream"]
    out = json.loads(analyze("leaks", "--json", "-q", "--phase", "train", trace).stdout)
    assert [p["live_bytes_at_entry"] for p in out["phases"]] == truth["allocated_at_entry"]
    for way, chain in check.WANT.items():
        first = [" -> ".join(c) for s in check.kept_at(out, job, way) if s["phase_index"] == 1 for c in s["held_by"]]
        assert first == [chain], (way, first)
    workspace = [s for s in check.kept_at(out, job, "stream") if s.get("category") == "workspace"]
    assert sorted(s["phase_index"] for s in workspace) == [1, 2, 3, 4]
    assert {(s["streams_one_a_call"], s["verdict"]) for s in workspace} == {(4, "grows every call")}
