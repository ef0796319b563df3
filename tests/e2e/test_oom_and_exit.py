"""Failures and endings: an allocation that runs out of memory (tests/programs/oom.c), and how
the traced process ended - its exit code, a caught fatal signal, SIGKILL
(tests/programs/exit_status.c)."""
import signal

import pytest

from conftest import MiB, assert_nothing_lost, assert_unchanged_behaviour, program, trace

OOM_ENV = {"FAKECUDA_TOTAL_BYTES": "16M"}

# ---- out of memory ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oom(tmp_path_factory):
    return trace(tmp_path_factory.mktemp("oom"), [program("oom")], env=OOM_ENV)


def test_oom_program_behaviour_is_unchanged(oom):
    assert (oom.returncode, oom.stdout) == (0, "too_big_site: cudaErrorMemoryAllocation\noom: done\n")
    assert_unchanged_behaviour(oom, env=OOM_ENV)


def test_failed_allocation_is_recorded_with_its_size_and_result(oom):
    failed, = oom.events("failed")
    assert (failed.api, failed.device, failed.kind) == ("cudaMalloc", 0, "device")
    assert (failed["size"], failed["addr"], failed["result"]) == (8 * MiB, 0, 2)  # cudaErrorMemoryAllocation


def test_oom_record_says_how_much_was_free(oom):
    rec, = oom.events("oom")
    failed, = oom.events("failed")
    assert (rec.api, rec.device, rec["size"], rec["result"]) == ("cudaMalloc", 0, 8 * MiB, 2)
    assert rec["aux"] == 4 * MiB  # free bytes: 16 MiB capacity - 12 MiB held
    assert rec["stack"] == failed["stack"]


def test_oom_stack_names_the_failing_site(oom):
    failed, = oom.events("failed")
    frames = oom.stack_of(failed)
    assert frames[0].startswith("too_big_site+") and frames[1].startswith("main+")


def test_oom_writes_a_checkpoint(oom):
    reasons = [r["reason"] for r in oom.records if r.op == "checkpoint"]
    assert reasons == [1, 3]  # VRT_CP_OOM, then VRT_CP_EXIT


def test_failed_allocation_holds_no_memory(oom):
    assert oom.totals() == {(0, "device"): (14 * MiB, 14 * MiB)}
    assert sorted(s["bytes"] for s in oom.live_sites()) == [2 * MiB, 12 * MiB]
    assert oom.site("fallback_site")["bytes"] == 2 * MiB
    assert_nothing_lost(oom)


# ---- how the process ended ----------------------------------------------------------------


def test_run_propagates_the_exit_code(tmp_path):
    t = trace(tmp_path, [program("exit_status"), "exit", "7"])
    assert (t.returncode, t.stdout) == (7, "exit_status: exit 7\n")
    assert (t.info["end_reason"], t.info["end_detail"]) == ("exited normally", 7)
    assert t.totals() == {(0, "device"): (1 * MiB, 1 * MiB)}


def test_sigkill_gives_128_plus_9_and_info_says_killed(tmp_path):
    snapshot = tmp_path / "before-kill.vrt"
    t = trace(tmp_path, [program("exit_status"), "signal", str(int(signal.SIGKILL)), snapshot])
    assert t.returncode == 128 + signal.SIGKILL
    assert t.stdout == "exit_status: signal 9\n"
    assert (t.info["end_reason"], t.info["end_detail"]) == ("killed by a signal", signal.SIGKILL)
    assert "killed by a signal (signal 9)" in t.info_text
    # The process never closed its trace; what it had written is still read.
    assert t.totals() == {(0, "device"): (1 * MiB, 1 * MiB)}
    assert t.site("leak_site")["bytes"] == 1 * MiB


def test_abort_is_a_signal_death(tmp_path):
    t = trace(tmp_path, [program("exit_status"), "abort", "0"])
    assert t.returncode == 128 + signal.SIGABRT
    assert (t.info["end_reason"], t.info["end_detail"]) == ("died from a signal", signal.SIGABRT)
    assert t.totals() == {(0, "device"): (1 * MiB, 1 * MiB)}


def test_segfault_is_a_signal_death(tmp_path):
    t = trace(tmp_path, [program("exit_status"), "fault", "0"])
    assert t.returncode == 128 + signal.SIGSEGV
    assert (t.info["end_reason"], t.info["end_detail"]) == ("died from a signal", signal.SIGSEGV)
    assert t.totals() == {(0, "device"): (1 * MiB, 1 * MiB)}


def test_raised_sigterm_still_kills_the_process(tmp_path):
    t = trace(tmp_path, [program("exit_status"), "signal", str(int(signal.SIGTERM))])
    assert t.returncode == 128 + signal.SIGTERM
    assert (t.info["end_reason"], t.info["end_detail"]) == ("died from a signal", signal.SIGTERM)


@pytest.mark.parametrize("signo", [signal.SIGABRT, signal.SIGSEGV])
def test_raised_fatal_signal_still_kills_the_process(tmp_path, signo):
    t = trace(tmp_path, [program("exit_status"), "signal", str(int(signo))])
    assert t.returncode == 128 + signo
