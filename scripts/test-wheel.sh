#!/usr/bin/env bash
# The wheel, as a user gets it: builds it (scripts/build-wheel.sh), installs it into a fresh venv
# without the network, and runs the README's main job on the CUDA test double from outside the
# checkout: `python -m vramtrace run --phase train` on the demo, `vramtrace leaks` through the
# console script, `vramtrace.load()`. Checks the wheel's tag and files, that both binaries have
# RUNPATH $ORIGIN and load the vendored libraries from vramtrace/_bin, and that nothing of the
# build tree is used. scripts/test.sh runs it; exits non-zero on the first failure.
#
#   scripts/test-wheel.sh [PYTHON...]   interpreters to make the venvs with (default: python3);
#                                       e.g. python3.9 python3.13 where they are installed
# Environment: WHEEL=path/to.whl tests that wheel instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
pythons=("$@")
[ ${#pythons[@]} -gt 0 ] || pythons=(python3)

fail() { echo "test-wheel: FAILED: $*" >&2; exit 1; }
step() { echo "test-wheel: $*"; }

scripts/build.sh >/dev/null    # the CUDA test doubles (build/tests/doubles)
doubles="$root/build/tests/doubles"
[ -f "$doubles/libcudart.so.13" ] || fail "$doubles/libcudart.so.13 is not built"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [ -n "${WHEEL:-}" ]; then
  whl="$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL")"
else
  step "building the wheel"
  whl="$(scripts/build-wheel.sh "$tmp/dist" | tail -1)"
fi
[ -f "$whl" ] || fail "no wheel ($whl)"
case "$(basename "$whl")" in
  vramtrace-*-py3-none-linux_x86_64.whl) ;;
  *) fail "wheel tag: $(basename "$whl") (want py3-none-linux_x86_64)" ;;
esac

# The wheel's files: the package, the console script entry point, the binaries and the vendored
# libraries; no build-tree leftovers.
python3 - "$whl" <<'EOF' || fail "wheel contents"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
want = {"vramtrace/__init__.py", "vramtrace/__main__.py", "vramtrace/_native.py", "vramtrace/_phases.py", "vramtrace/_retention.py", "vramtrace/_owners.py", "vramtrace/_chains.py",
        "vramtrace/_bootstrap/sitecustomize.py", "vramtrace/_bin/vramtrace", "vramtrace/_bin/libvramtrace.so",
        "vramtrace/_bin/libunwind.so.8", "vramtrace/_bin/libelf.so.1", "vramtrace/_bin/libzstd.so.1"}
missing = want - names
bad = [n for n in names if "__pycache__" in n or n.endswith(".pyc") or "/tests/" in n]
ep = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
z = zipfile.ZipFile(sys.argv[1])
if missing or bad or not ep or "vramtrace = vramtrace.__main__:main" not in z.read(ep[0]).decode():
    sys.exit("missing %s, unexpected %s, entry points %s" % (sorted(missing), bad, ep))
EOF

n=0
for py in "${pythons[@]}"; do
  n=$((n + 1))
  command -v "$py" >/dev/null || fail "$py not found"
  venv="$tmp/venv$n"
  step "$("$py" --version 2>&1): fresh venv, pip install $(basename "$whl") (no index)"
  "$py" -m venv "$venv" || fail "$py -m venv (Debian/Ubuntu: apt-get install python3-venv)"
  "$venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check "$whl" \
    || fail "pip install the wheel into the $py venv"

  bin="$("$venv/bin/python" -c 'import os, vramtrace; print(os.path.dirname(vramtrace.__file__))')/_bin"
  case "$bin" in "$venv"/*) ;; *) fail "vramtrace imported from $bin, not the venv" ;; esac
  [ -x "$bin/vramtrace" ] || fail "$bin/vramtrace is not executable"
  # (Outputs are captured first: with pipefail, `cmd | grep -q` can fail on SIGPIPE.)
  for f in "$bin/vramtrace" "$bin/libvramtrace.so"; do
    dyn="$(readelf -d "$f")"
    grep -q 'R.*PATH.*\[\$ORIGIN\]' <<<"$dyn" || fail "$f: RUNPATH is not \$ORIGIN"
    grep -qi 'NEEDED.*libcuda' <<<"$dyn" && fail "$f links a CUDA library"
  done
  # Every library a binary needs resolves into _bin or to the base system; the vendored ones into _bin.
  for f in "$bin/vramtrace" "$bin/libvramtrace.so"; do
    deps="$(ldd "$f")"
    grep -q 'not found' <<<"$deps" && fail "ldd $f: $(grep 'not found' <<<"$deps")"
    for lib in libunwind.so.8 libelf.so.1 libzstd.so.1 liblzma.so.5; do
      where="$(awk -v l="$lib" '$1 == l {print $3}' <<<"$deps")"
      [ -z "$where" ] || [ "$(dirname "$where")" = "$bin" ] || fail "ldd $f: $lib from $where, not $bin"
    done
  done

  work="$tmp/work$n"
  mkdir -p "$work"
  cp scripts/demo/train_leak.py "$work/"
  # Only the venv and the CUDA double: no checkout, no build tree, no developer settings.
  run_env=(env -u PYTHONPATH -u VRAMTRACE_PRELOAD -u LD_PRELOAD PATH="$venv/bin:/usr/bin:/bin"
           LD_LIBRARY_PATH="$doubles" HOME="$work")

  step "python -m vramtrace run --phase train -o t.vrt -- python train_leak.py"
  (cd "$work" && "${run_env[@]}" python -m vramtrace run --phase train -o t.vrt -- python train_leak.py) \
    >"$work/run.out" 2>&1 || { cat "$work/run.out"; fail "vramtrace run"; }
  grep -q "trained on 4 samples" "$work/run.out" || { cat "$work/run.out"; fail "the demo's output"; }
  grep -q "phases disabled" "$work/run.out" && { cat "$work/run.out"; fail "the phase hooks did not install"; }
  [ -s "$work/t.vrt" ] || fail "no trace t.vrt"

  step "vramtrace leaks --phase train t.vrt (console script)"
  [ -x "$venv/bin/vramtrace" ] || fail "no console script $venv/bin/vramtrace"
  (cd "$work" && "${run_env[@]}" vramtrace leaks --phase train t.vrt) >"$work/leaks.out" 2>&1 \
    || { cat "$work/leaks.out"; fail "vramtrace leaks"; }
  for want in "phase train (4 invocations" "+84.0 MiB per train() call" "survivors by site" \
              "__init__ ("  "train_leak.py:59)" "grows every call"; do
    grep -qF "$want" "$work/leaks.out" || { cat "$work/leaks.out"; fail "leaks output lacks '$want'"; }
  done

  step "vramtrace.load('t.vrt')"
  (cd "$work" && "${run_env[@]}" python -c "import vramtrace; a = vramtrace.load('t.vrt'); print(a.report.devices[0].peak_bytes, a['report']['devices'])") \
    >"$work/load.out" 2>&1 || { cat "$work/load.out"; fail "vramtrace.load"; }
  grep -q "'peak_bytes'" "$work/load.out" || { cat "$work/load.out"; fail "vramtrace.load: no devices"; }

  step "the traced process maps the vendored libraries from _bin"
  (cd "$work" && "${run_env[@]}" vramtrace run -q -o maps.vrt -- python -c \
     "print(open('/proc/self/maps').read())") >"$work/maps.out" 2>&1 || { cat "$work/maps.out"; fail "vramtrace run (maps)"; }
  for lib in libvramtrace.so libunwind.so.8 libelf.so.1 libzstd.so.1; do
    grep -q " $bin/$lib\$" "$work/maps.out" || fail "$lib is not mapped from $bin: $(grep "$lib" "$work/maps.out" | head -1)"
  done

  step "vramtrace --version: $("${run_env[@]}" "$venv/bin/vramtrace" --version)"

  # A GPU node without these libraries: as root, in a mount namespace of its own, the system's
  # copies are made unloadable (bound over by /dev/null) and the job runs again.
  if [ "$n" = 1 ] && [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    step "again with the system's libunwind, libelf, libzstd and liblzma unloadable"
    hide=""
    for lib in libunwind.so.8 libunwind-x86_64.so.8 libunwind-ptrace.so.0 libelf.so.1 libzstd.so.1 liblzma.so.5; do
      real="$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ && !seen++ {print $NF}')"
      if [ -n "$real" ]; then hide="$hide mount --bind /dev/null $(readlink -f "$real") &&"; fi
    done
    (cd "$work" && unshare -m "${run_env[@]}" bash -c "$hide python -m vramtrace run -q --phase train -o hidden.vrt \
        -- python train_leak.py && vramtrace leaks --phase train hidden.vrt") >"$work/hidden.out" 2>&1 \
      || { cat "$work/hidden.out"; fail "the wheel without the system's libraries"; }
    grep -qF "+84.0 MiB per train() call" "$work/hidden.out" || { cat "$work/hidden.out"; fail "leaks without the system's libraries"; }
  fi
done
echo "test-wheel: ok ($(basename "$whl"), $(du -k "$whl" | cut -f1) KiB)"
