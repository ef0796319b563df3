#!/usr/bin/env python3
"""The first user story, attached to instead of started under vramtrace (issue 19): real
DeepSpeed ZeRO-2, `deepspeed.initialize` in every train() call on one model, `del engine;
gc.collect(); empty_cache()` after each (retention_scenarios.py's train), for argv[1] calls.
Untraced; `vramtrace attach` is pointed at it while it runs (scripts/gpu/attach_ds_check.py).
Prints memory_allocated() at each call's entry on VRAMTRACE_TRUTH lines as it goes, and at the
end the whole account."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import retention_scenarios as rs  # noqa: E402
import torch  # noqa: E402


def main():
    calls = int(sys.argv[1])
    rs.MODEL = rs.llama().cuda()
    entries, stamps = [], []
    for i in range(calls):
        torch.cuda.synchronize()
        entries.append(torch.cuda.memory_allocated())
        stamps.append(time.monotonic())
        print("VRAMTRACE_CALL %d %d %.3f" % (i, entries[-1], stamps[-1]), flush=True)
        rs.train(2, False)
    torch.cuda.synchronize()
    end = torch.cuda.memory_allocated()
    print("VRAMTRACE_TRUTH " + json.dumps({
        "calls": calls, "allocated_at_entry": entries, "allocated_at_end": end,
        "growth_per_call": (end - entries[1]) / (calls - 1) if calls > 1 else 0,
        "seconds_per_call": (stamps[-1] - stamps[0]) / (calls - 1) if calls > 1 else 0}), flush=True)


if __name__ == "__main__":
    main()
