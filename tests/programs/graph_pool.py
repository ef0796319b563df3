"""graph_pool.py - a CUDA graph captured each call and kept: what the graph's memory pool holds
lives as long as the graph (PyTorch's torch.cuda.graph, torch.compile's mode="reduce-overhead":
a new graph for each new shape).

Usage: python3 graph_pool.py PATH/TO/libcudart.so.13 CALLS [--other-thread]

train(i) makes a stream, begins capturing on it (cudaStreamBeginCapture), allocates the
graph's pool (cudaMalloc, 6 MiB) and ends the capture; GRAPHS keeps the pool. Each call also
keeps 2 MiB allocated outside any capture (RESULTS), and allocates and frees a temporary inside
the capture. With --other-thread, the 2 MiB kept each call are allocated by another thread
while the capture is open: not made for the graph.
"""
import ctypes
import sys
import threading

MiB = 1 << 20
GRAPHS, RESULTS = [], []


def load(path):
    rt = ctypes.PyDLL(path)
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    rt.cudaStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    rt.cudaStreamBeginCapture.argtypes = [ctypes.c_void_p, ctypes.c_int]
    rt.cudaStreamEndCapture.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    for fn in (rt.cudaMalloc, rt.cudaFree, rt.cudaStreamCreate, rt.cudaStreamBeginCapture, rt.cudaStreamEndCapture):
        fn.restype = ctypes.c_int
    return rt


RT = load(sys.argv[1])
CALLS = int(sys.argv[2])
OTHER_THREAD = "--other-thread" in sys.argv


def check(rc, what):
    if rc != 0:
        print(f"{what} failed: {rc}", file=sys.stderr)
        sys.exit(3)


def malloc(size):
    p = ctypes.c_void_p()
    check(RT.cudaMalloc(ctypes.byref(p), size), "cudaMalloc")
    return p


def keep_result():
    RESULTS.append(malloc(2 * MiB))  # kept: result


def train(i):
    s = ctypes.c_void_p()
    check(RT.cudaStreamCreate(ctypes.byref(s)), "cudaStreamCreate")
    check(RT.cudaStreamBeginCapture(s, 0), "cudaStreamBeginCapture")
    GRAPHS.append(malloc(6 * MiB))  # kept: graph
    check(RT.cudaFree(malloc(1 * MiB)), "cudaFree")
    if OTHER_THREAD:
        t = threading.Thread(target=keep_result)
        t.start()
        t.join()
    graph = ctypes.c_void_p()
    check(RT.cudaStreamEndCapture(s, ctypes.byref(graph)), "cudaStreamEndCapture")
    if not OTHER_THREAD:
        keep_result()


for i in range(CALLS):
    train(i)
print(f"graph_pool: {CALLS} calls")
