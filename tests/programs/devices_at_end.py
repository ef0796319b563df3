"""devices_at_end.py - memory left live at the end on several devices and in pinned host memory.

Usage: FAKECUDA_DEVICES=4 python3 devices_at_end.py PATH/TO/libcudart.so.13 DEVICES

On device d (0 .. DEVICES-1) it keeps (d + 1) MiB from cudaMalloc, then 3 MiB of pinned host
memory from cudaMallocHost, and exits without freeing any: what `report` says is live at the
end, and by what it is, per device and for the host.
"""
import ctypes
import sys

MiB = 1 << 20


def main():
    rt = ctypes.PyDLL(sys.argv[1])
    devices = int(sys.argv[2])
    p = ctypes.c_void_p()
    for d in range(devices):
        if rt.cudaSetDevice(d) or rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t((d + 1) * MiB)):
            sys.exit("devices_at_end: device %d failed" % d)
    if rt.cudaMallocHost(ctypes.byref(p), ctypes.c_size_t(3 * MiB)):
        sys.exit("devices_at_end: cudaMallocHost failed")
    print("devices_at_end: %d devices" % devices)


if __name__ == "__main__":
    main()
