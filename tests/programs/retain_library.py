"""train() calls an installed library (tests/programs/pylib, on PYTHONPATH) that keeps what it
allocates: the headline names the user's call into it."""
import fakeds


def train():
    fakeds.initialize(1 << 20)  # the line the headline names


for _ in range(3):
    train()
