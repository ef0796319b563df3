#!/usr/bin/env python3
"""A Python-heavy loop for measuring what `vramtrace run --phase train` costs everything else:
many small Python calls, a few calls of train(). Prints the loop time in seconds as JSON."""
import json
import time


def leaf(x):
    return x + 1


def middle(x):
    return leaf(x) * 2


def train(n):
    total = 0
    for i in range(n):
        total += middle(i)
    return total


def main():
    start = time.perf_counter()
    for _ in range(5):
        train(400_000)
    print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main()
