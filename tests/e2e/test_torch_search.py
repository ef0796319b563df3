"""When the tensor layer finds PyTorch (preload/torch.c): it looks for libc10_cuda at a device
allocation, and without it looks again at most every 20 ms, on the clock its allocation events
are stamped with; a PyTorch brought up after the process's first allocation is found at its
first segment past that."""
import sys

from conftest import DOUBLES, PROGRAM_SOURCES, build_fake_c10, program, trace

TENSOR_API = "torch.CUDACachingAllocator"


def test_pytorch_brought_up_after_the_first_allocation_is_found(tmp_path):
    fake_c10 = build_fake_c10(tmp_path / "fake")
    t = trace(tmp_path, [sys.executable, PROGRAM_SOURCES / "torch_late_import.py", program("libpyalloc_lib.so")],
              env={"LD_LIBRARY_PATH": str(DOUBLES), "FAKETORCH_C10": fake_c10})
    assert t.returncode == 0, t.stderr
    segment = int(t.stdout.split()[-1], 16)
    allocs = [r for r in t.events("alloc") if r.api == "cudaMalloc"]
    assert len(allocs) == 2 and allocs[1]["addr"] == segment, [(r.api, hex(r["addr"])) for r in allocs]
    blocks = t.events("block_alloc", TENSOR_API)
    assert [(r["addr"], r["size"]) for r in blocks] == [(segment, 512 * 1024)], blocks
