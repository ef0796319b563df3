#!/usr/bin/env bash
# Builds the vramtrace wheel: dist/vramtrace-<version>-py3-none-linux_x86_64.whl, one file that
# `pip install` puts on a GPU node (CPython 3.9-3.13, x86-64 glibc Linux; no CUDA, compiler or
# libunwind needed there). It holds the Python package, the `vramtrace` command
# (vramtrace/_bin/vramtrace, run through the `vramtrace` console script or `python -m vramtrace`),
# the preload (vramtrace/_bin/libvramtrace.so) and the shared libraries they need that a base
# Ubuntu 24.04 lacks, all with RUNPATH $ORIGIN.
#
#   scripts/build-wheel.sh [OUTDIR]      (default: dist)
#
# Environment:
#   PYTHON       the interpreter that builds (default: /usr/bin/python3 when it has Debian's
#                python3-mesonpy, which builds offline; else python3, whose pip fetches
#                meson-python and meson from PyPI into an isolated build environment)
#   CUDA_HOME    where the CUDA Toolkit headers are (as scripts/build.sh)
#
# The build runs on a copy of the working tree (tracked and untracked, less what .gitignore
# ignores), so nothing is written into the checkout but OUTDIR.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
outdir="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"

cuda_include() {
  for d in "${CUDA_HOME:-}/include" "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")/../include" \
           /usr/local/cuda/include /usr/include; do
    if [ -f "$d/cuda.h" ] && [ -f "$d/cuda_runtime_api.h" ]; then (cd "$d" && pwd); return 0; fi
  done
  echo "build-wheel: the CUDA Toolkit headers (cuda.h, cuda_runtime_api.h) were not found; set CUDA_HOME" >&2
  return 1
}
inc="$(cuda_include)"

if [ -z "${PYTHON:-}" ]; then
  if /usr/bin/python3 -c 'import mesonpy' 2>/dev/null; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi
if "$PYTHON" -c 'import mesonpy' 2>/dev/null; then
  isolation=(--no-build-isolation)   # the interpreter's own meson-python and meson, offline
else
  isolation=()                       # pip installs meson-python and meson from PyPI for the build
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/out"
# The working tree as it is now, without build directories and other ignored files.
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  if [ -e "$f" ]; then printf '%s\0' "$f"; fi
done | tar -C "$root" --null -T - -cf - | tar -C "$work/src" -xf -

echo "build-wheel: $("$PYTHON" --version) ${isolation[*]:-(isolated build)}, CUDA headers $inc"
if ! "$PYTHON" -m pip wheel --no-deps --disable-pip-version-check "${isolation[@]}" \
      --config-settings=setup-args=-Dtoolkit_include="$inc" \
      -w "$work/out" "$work/src" >"$work/log" 2>&1; then
  cat "$work/log" >&2
  echo "build-wheel: pip wheel failed" >&2
  exit 1
fi
built=("$work"/out/vramtrace-*.whl)
[ -f "${built[0]}" ] || { cat "$work/log" >&2; echo "build-wheel: no wheel was built" >&2; exit 1; }

# meson-python tags a wheel with files in platlib cpXY-cpXY; nothing here depends on the Python
# version (no extension modules), so: py3-none-<platform>. This rewrites the Tag lines of
# .dist-info/WHEEL and its RECORD entry, keeping every other member (and its mode bits) as is.
"$PYTHON" - "${built[0]}" "$outdir" <<'EOF'
import base64, hashlib, os, re, sys, zipfile
src, outdir = sys.argv[1], sys.argv[2]
name, version, _py, _abi, plat = os.path.basename(src)[:-4].split("-")
tag = "py3-none-" + plat
dst = os.path.join(outdir, "%s-%s-%s.whl" % (name, version, tag))
with zipfile.ZipFile(src) as zin:
    infos = zin.infolist()
    data = {i.filename: zin.read(i) for i in infos}
wheel_name = next(n for n in data if re.fullmatch(r"[^/]+\.dist-info/WHEEL", n))
record_name = wheel_name[:-len("WHEEL")] + "RECORD"
lines = [l for l in data[wheel_name].decode().splitlines() if not l.startswith("Tag:")]
data[wheel_name] = ("\n".join(lines + ["Tag: " + tag]) + "\n").encode()
digest = base64.urlsafe_b64encode(hashlib.sha256(data[wheel_name]).digest()).rstrip(b"=").decode()
record = []
for line in data[record_name].decode().splitlines():
    if line.split(",")[0] == wheel_name:
        line = "%s,sha256=%s,%d" % (wheel_name, digest, len(data[wheel_name]))
    record.append(line)
data[record_name] = ("\n".join(record) + "\n").encode()
tmp = dst + ".tmp"
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
    for info in infos:
        zout.writestr(info, data[info.filename], compress_type=zipfile.ZIP_DEFLATED)
os.replace(tmp, dst)
print(dst)
EOF
