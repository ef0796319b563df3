#!/usr/bin/env python3
"""Fetches what the layout probe needs from one PyTorch release's wheel on PyPI.

    fetch.py WORK VERSION...

For each VERSION (e.g. 2.4.1), `pip download --no-deps` the x86-64 Linux wheel for CPython 3.11,
keep torch/include/, torch/lib/libc10.so, torch/lib/libc10_cuda.so, torch/version.py and the
wheel's METADATA under WORK/VERSION/, and delete the wheel. A release already fetched is skipped.
Nothing fetched here is committed: only the facts generate.py derives from it.
"""
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"]
KEEP = ("torch/include/", "torch/lib/libc10.so", "torch/lib/libc10_cuda.so", "torch/version.py")


def fetch(work: Path, version: str) -> Path:
    dest = work / version
    if (dest / "done").exists():
        return dest
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.11", "--implementation", "cp", "-d", tmp, f"torch=={version}"]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        subprocess.run(cmd, check=True)
        wheel = next(Path(tmp).glob("torch-*.whl"))
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.startswith(KEEP) or name.endswith(".dist-info/METADATA"):
                    z.extract(name, dest)
        (dest / "wheel").write_text(wheel.name + "\n")
    (dest / "done").write_text("")
    return dest


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    work = Path(argv[0])
    work.mkdir(parents=True, exist_ok=True)
    for v in argv[1:]:
        print(fetch(work, v), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
