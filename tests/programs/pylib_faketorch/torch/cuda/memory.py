"""torch.cuda.memory of the stand-in."""

calls = 0
# Callables run when a snapshot begins and once its answer is built: what the program's other
# threads do meanwhile, at a chosen moment.
before_snapshot = []
after_snapshot = []
answer_instead = None  # a callable whose result (or exception) _snapshot() gives instead


def _snapshot():
    global calls
    from torch import cuda
    calls += 1
    while before_snapshot:
        before_snapshot.pop(0)()
    answer = {"segments": [s.as_dict() for s in cuda._segments], "device_traces": []}
    if answer_instead:
        answer = answer_instead(answer)
    while after_snapshot:
        after_snapshot.pop(0)()
    return answer


def memory_snapshot():
    return _snapshot()["segments"]
