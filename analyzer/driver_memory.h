/* SPDX-License-Identifier: MIT */
/*
 * The device memory the NVIDIA driver counts for one process (NVML's per-process figure, what
 * nvidia-smi shows), to set beside what a trace sees: memory reached through a CUDA function
 * the program looked up before an attach grows there and not in the trace. NVML is loaded at
 * run time (libnvidia-ml.so.1 comes with the driver, not the toolkit); a machine without it has
 * no figure, and nothing else changes.
 */
#ifndef VRAMTRACE_DRIVER_MEMORY_H
#define VRAMTRACE_DRIVER_MEMORY_H

#include <stdint.h>

struct vrt_driver_memory;

/* 0, or VRT_E_UNSUPPORTED: no NVML here, or it did not start (no driver, no device). */
int vrt_driver_memory_open(struct vrt_driver_memory **out);

/*
 * What the driver counts for pid over all its devices, in *bytes. VRT_E_NOENT: no device lists
 * pid (no CUDA context yet, or a container whose driver names processes by the host's PIDs);
 * VRT_E_UNSUPPORTED: the driver lists pid without a figure (NVML's "not available").
 */
int vrt_driver_memory_of(struct vrt_driver_memory *d, int pid, uint64_t *bytes);

void vrt_driver_memory_close(struct vrt_driver_memory *d);

#endif
