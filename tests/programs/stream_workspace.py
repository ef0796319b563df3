"""stream_workspace.py - a workspace kept per stream, and a stream made each call (what a job
does that runs part of each step on `torch.cuda.Stream()` made inside the step: PyTorch keeps a
cuBLAS workspace for every stream a matmul ran on, and never frees it).

Usage: python3 stream_workspace.py PATH/TO/libcudart.so.13 CALLS [--two-streams | --also-shared]

train(i) asks for the workspace of a stream, made by cudaStreamCreate in that call, allocated
with cudaMallocAsync on that stream by workspace_for(), and kept in WORKSPACES. Each call also
makes and frees a temporary on the same stream. With --two-streams, two streams made once and
taken in turn (double buffering), and a workspace kept per call (a workspace that grows for
another reason); with --also-shared, first a workspace on a stream made once, then the new
stream's, from the same line (each call's survivors there on two streams, one every call's).
"""
import ctypes
import sys

MiB = 1 << 20
WORKSPACE = 3  # MiB a workspace
WORKSPACES = {}


def load(path):
    rt = ctypes.PyDLL(path)
    rt.cudaMallocAsync.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_void_p]
    rt.cudaFreeAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    rt.cudaStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    for fn in (rt.cudaMallocAsync, rt.cudaFreeAsync, rt.cudaStreamCreate):
        fn.restype = ctypes.c_int
    return rt


RT = load(sys.argv[1])
CALLS = int(sys.argv[2])
TWO_STREAMS = "--two-streams" in sys.argv
ALSO_SHARED = "--also-shared" in sys.argv


def check(rc, what):
    if rc != 0:
        print(f"{what} failed: {rc}", file=sys.stderr)
        sys.exit(3)


def malloc_async(size, stream):
    p = ctypes.c_void_p()
    check(RT.cudaMallocAsync(ctypes.byref(p), size, stream), "cudaMallocAsync")
    return p


def new_stream():
    s = ctypes.c_void_p()
    check(RT.cudaStreamCreate(ctypes.byref(s)), "cudaStreamCreate")
    return s


def workspace_for(stream, i):
    key = (stream.value, i if TWO_STREAMS or stream is SHARED else 0)
    if key not in WORKSPACES:
        WORKSPACES[key] = malloc_async(WORKSPACE * MiB, stream)  # kept: workspace
    return WORKSPACES[key]


SHARED, OTHER = new_stream(), new_stream()


def train(i):
    stream = (SHARED, OTHER)[i % 2] if TWO_STREAMS else new_stream()
    for s in (SHARED, stream) if ALSO_SHARED else (stream,):
        workspace_for(s, i)
    tmp = malloc_async(MiB, stream)
    check(RT.cudaFreeAsync(tmp, stream), "cudaFreeAsync")


for i in range(CALLS):
    train(i)
print("streams", len({k[0] for k in WORKSPACES}), "workspaces", len(WORKSPACES))
