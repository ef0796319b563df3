"""export --format parquet and the documented DuckDB queries (docs/python.md, "Per-rank
analysis") on 8 per-rank traces of tests/programs/rank_leak.py made on the CUDA doubles: the
figures equal `vramtrace leaks` on each file. Needs pyarrow and duckdb (scripts/test.sh installs
them); without them these tests skip, naming what is missing."""
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

import pytest

from conftest import CUDART, VRAMTRACE, MiB, PROGRAM_SOURCES, SOURCE, analyze, trace

RANKS = 8


def _missing():
    missing = []
    for name in ("pyarrow", "duckdb"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    return missing


MISSING = _missing()
if MISSING:
    sys.stderr.write("\ntest_parquet: SKIPPED, %s not importable by %s (pip install pyarrow duckdb)\n"
                     % (" and ".join(MISSING), sys.executable))
needs_engines = pytest.mark.skipif(bool(MISSING), reason="NOT TESTED: %s not importable by %s (pip install "
                                   "pyarrow duckdb)" % (" and ".join(MISSING), sys.executable))


def documented_queries():
    text = (SOURCE / "docs" / "python.md").read_text()
    section = text[text.index("## Per-rank analysis"):]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """8 per-rank traces in ranks/ and their tables in tables/ (one export of the directory)."""
    tmp = tmp_path_factory.mktemp("parquet")
    (tmp / "ranks").mkdir()
    for rank in range(RANKS):
        t = trace(tmp, [sys.executable, PROGRAM_SOURCES / "rank_leak.py"], name="ranks/rank%d.vrt" % rank,
                  env={"CUDART": str(CUDART), "PYTHONPATH": str(SOURCE / "python"), "RANK": str(rank),
                       "WORLD_SIZE": str(RANKS)})
        assert t.returncode == 0 and t.stdout == "kept 3\n", t.stderr
    if not MISSING:
        env = dict(os.environ, VRAMTRACE_PYTHON=sys.executable)
        p = subprocess.run([str(VRAMTRACE), "export", "--format", "parquet", "-q", "-o", str(tmp / "tables"), str(tmp / "ranks")],
                           capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
    return tmp


def leaks_of(path):
    return json.loads(analyze("leaks", "--json", "-q", path).stdout)


def run_query(tmp, sql):
    import duckdb
    con = duckdb.connect()
    cwd = os.getcwd()
    os.chdir(tmp)  # the documented queries name 'tables/...' relative to where they run
    try:
        return con.sql(sql).fetchall()
    finally:
        os.chdir(cwd)


@needs_engines
def test_growth_per_call_per_rank_equals_leaks_on_each_file(ranks):
    per_call, _ = documented_queries()
    rows = run_query(ranks, per_call)
    expected = []
    for rank in range(RANKS):
        leaks = leaks_of(ranks / "ranks" / ("rank%d.vrt" % rank))
        expected += [(rank, p["index"], p["survivor_bytes"]) for p in leaks["phases"]]
    assert rows == expected
    assert [r[2] for r in rows if r[0] == 5] == [8 * MiB] * 3  # what rank_leak.py keeps on rank 5


@needs_engines
def test_the_rank_that_grows_most_and_its_top_site_equal_leaks(ranks):
    _, worst = documented_queries()
    [(rank, growth, stack, site_bytes, function, file, line)] = run_query(ranks, worst)
    by_rank = {r: leaks_of(ranks / "ranks" / ("rank%d.vrt" % r)) for r in range(RANKS)}
    top_rank = max(by_rank, key=lambda r: by_rank[r]["growth_per_invocation_bytes"])
    sites = defaultdict(int)
    for s in by_rank[top_rank]["survivors"]:
        sites[s["stack"]] += s["bytes"]
    top_stack = max(sites, key=sites.get)
    head = next(s["headline"] for s in by_rank[top_rank]["survivors"] if s["stack"] == top_stack)
    assert (rank, growth, stack, site_bytes) == \
        (top_rank, by_rank[top_rank]["growth_per_invocation_bytes"], top_stack, sites[top_stack])
    assert (function, file, line) == (head["function"], head["file"], head["line"])
    assert (rank, growth, site_bytes, function) == (5, 8 * MiB, 24 * MiB, "cuda_malloc")
    text = analyze("leaks", "-q", ranks / "ranks" / "rank5.vrt").stdout
    assert "+8.00 MiB per train() call" in text
    assert re.search(r"24\.0 MiB +3x +cuda_malloc \(.*rank_leak\.py:%d\)" % line, text), text


@needs_engines
def test_every_table_is_there_with_a_row_per_rank(ranks):
    counts = run_query(ranks, "SELECT count(DISTINCT rank), count(*) FROM 'tables/traces.parquet'")
    assert counts == [(RANKS, RANKS)]
    events = run_query(ranks, "SELECT rank, count(*) FROM 'tables/events.parquet' GROUP BY rank ORDER BY rank")
    written = run_query(ranks, "SELECT rank, events FROM 'tables/traces.parquet' ORDER BY rank")
    assert events == written
    allocs = run_query(ranks, "SELECT sum(size) FROM 'tables/events.parquet' WHERE rank = 5 AND op = 'alloc'")
    assert allocs == [(3 * 12 * MiB,)]
    frames = run_query(ranks, "SELECT count(*) FROM 'tables/stacks.parquet' s JOIN 'tables/frames.parquet' f "
                              "USING (trace, stack) WHERE f.position = s.headline AND f.function = s.headline_function")
    assert frames == run_query(ranks, "SELECT count(*) FROM 'tables/stacks.parquet' WHERE headline >= 0")


def test_without_pyarrow_the_export_says_so_in_one_line(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    # This interpreter, with pyarrow hidden (an import of it raises ImportError).
    wrapper = bare / "python"
    wrapper.write_text("#!/bin/sh\nshift 2  # -m vramtrace._parquet\nexec %s -c 'import sys; sys.modules[\"pyarrow\"] = None; "
                       "import runpy; sys.argv[0] = \"vramtrace._parquet\"; "
                       "runpy.run_module(\"vramtrace._parquet\", run_name=\"__main__\")' \"$@\"\n" % sys.executable)
    wrapper.chmod(0o755)
    p = subprocess.run([str(VRAMTRACE), "export", "--format", "parquet", "-o",
                        str(tmp_path / "t"), str(SOURCE / "tests" / "golden" / "oom.vrt")],
                       capture_output=True, text=True, env=dict(os.environ, VRAMTRACE_PYTHON=str(wrapper)), timeout=60)
    assert p.returncode == 5, p.stderr
    assert p.stderr.count("\n") == 1 and "needs pyarrow" in p.stderr and "pip install pyarrow" in p.stderr, p.stderr
    assert not (tmp_path / "t").exists()


@needs_engines
def test_small_row_groups_give_the_same_tables_and_a_bad_trace_leaves_none(ranks, tmp_path, monkeypatch):
    sys.path.insert(0, str(SOURCE / "python"))
    import vramtrace
    from vramtrace import TraceDamaged, _parquet
    monkeypatch.setenv("VRAMTRACE_ANALYZER", str(VRAMTRACE))
    monkeypatch.setattr(_parquet._Table, "BATCH", 7)
    vramtrace.export_parquet(ranks / "ranks", tmp_path / "small")
    for table in _parquet.TABLES:
        sql = "SELECT * FROM '%s/%s.parquet' ORDER BY ALL"
        assert run_query(ranks, sql % (tmp_path / "small", table)) == run_query(ranks, sql % ("tables", table)), table
    import pyarrow.parquet
    assert pyarrow.parquet.ParquetFile(tmp_path / "small" / "events.parquet").num_row_groups > 1

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "a.vrt").write_bytes((ranks / "ranks" / "rank0.vrt").read_bytes())
    (mixed / "b.vrt").write_bytes(b"not a trace" * 20)
    with pytest.raises(TraceDamaged) as e:
        _parquet.export_parquet(mixed, tmp_path / "out", quiet=True)
    assert str(mixed / "b.vrt") in str(e.value)
    assert not list((tmp_path / "out").glob("*.parquet"))


@needs_engines
@pytest.mark.parametrize("name, column, values", [("torch-more", "streams_one_a_call", {0, 4}),
                                                   ("graph-pool", "captured_bytes", {0, 1 * MiB, 32 * MiB})])
def test_the_survivors_table_carries_what_leaks_says_of_streams_and_graphs(tmp_path, name, column, values):
    """tests/golden/h200/torch-more.vrt: the cuBLAS workspace kept for a stream made each call;
    graph-pool.vrt: what CUDA graph captures allocated (test_retention_shapes.py reads both from
    leaks); the table carries leaks' streams_one_a_call and captured_bytes."""
    trace = SOURCE / "tests" / "golden" / "h200" / (name + ".vrt")
    p = subprocess.run([str(VRAMTRACE), "export", "--format", "parquet", "-q", "-o",
                        str(tmp_path / "t"), str(trace)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, VRAMTRACE_PYTHON=sys.executable))
    assert p.returncode == 0, p.stderr
    rows = run_query(tmp_path, "SELECT position, stack, %s FROM 't/survivors.parquet' ORDER BY position" % column)
    leaks = json.loads(analyze("leaks", "--json", "-q", trace).stdout)
    assert rows == [(i, s["stack"], s[column]) for i, s in enumerate(leaks["survivors"])]
    assert {r[2] for r in rows} == values
