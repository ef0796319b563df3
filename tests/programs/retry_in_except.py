"""The retry that runs inside the except block (tests/e2e/test_retention_elsewhere.py): the first
train() call fails after it allocated its activations; the handler calls train() again before
the block ends, so the failed call's frames, and its activations with them, stay held by the
exception being handled: a second out-of-memory error where the first attempt's memory was
thought gone. Bound to a name or not (argv[1] "named"), the exception keeps them.

    retry_in_except.py [named]
"""
import sys

from device_buffer import DeviceBuffer

MiB = 1 << 20
ACTIVATIONS = 8


def train(i, fail):
    activations = DeviceBuffer(ACTIVATIONS * MiB)  # kept: failed attempt
    if fail:
        raise MemoryError("out of memory (as CUDA would say)")
    return activations.nbytes


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "named":
        try:
            train(0, True)
        except MemoryError as failure:
            train(1, False)  # retried inside the block: still held by failure
            train(2, False)
    else:
        try:
            train(0, True)
        except MemoryError:
            train(1, False)  # retried inside the block: still held
            train(2, False)


if __name__ == "__main__":
    main()
