/* SPDX-License-Identifier: MIT */
/*
 * NVML through dlopen: the five entry points below, declared from NVML's stable C ABI (the
 * toolkit ships no nvml.h). nvmlDeviceGetComputeRunningProcesses_v3 fills nvmlProcessInfo_t,
 * { pid, usedGpuMemory, gpuInstanceId, computeInstanceId }; a count too small for the list is
 * answered NVML_ERROR_INSUFFICIENT_SIZE with the count needed.
 */
#define _GNU_SOURCE
#include "driver_memory.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>

#include "vramtrace/error.h"

typedef struct nvml_device *nvml_device;

struct nvml_process {
	unsigned int pid;
	unsigned long long used_bytes;
	unsigned int gpu_instance, compute_instance;
};

enum {
	NVML_OK = 0,
	NVML_INSUFFICIENT_SIZE = 7,
	MAX_DEVICES = 64,
	MAX_PROCESSES = 4096, /* per device: a list longer than this is not believed */
};
#define NVML_NOT_AVAILABLE (~0ull)

struct vrt_driver_memory {
	void *lib;
	int (*shutdown)(void);
	int (*count)(unsigned int *);
	int (*device)(unsigned int, nvml_device *);
	int (*processes)(nvml_device, unsigned int *, struct nvml_process *);
	struct nvml_process *list;
	unsigned int cap;
};

int vrt_driver_memory_open(struct vrt_driver_memory **out)
{
	*out = NULL;
	struct vrt_driver_memory *d = calloc(1, sizeof(*d));
	if (!d)
		return VRT_E_NOMEM;
	if (!(d->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL))) {
		free(d);
		return VRT_E_UNSUPPORTED;
	}
	int (*init)(void) = (int (*)(void))dlsym(d->lib, "nvmlInit_v2");
	d->shutdown = (int (*)(void))dlsym(d->lib, "nvmlShutdown");
	d->count = (int (*)(unsigned int *))dlsym(d->lib, "nvmlDeviceGetCount_v2");
	d->device = (int (*)(unsigned int, nvml_device *))dlsym(d->lib, "nvmlDeviceGetHandleByIndex_v2");
	d->processes = (int (*)(nvml_device, unsigned int *, struct nvml_process *))dlsym(
		d->lib, "nvmlDeviceGetComputeRunningProcesses_v3");
	if (!init || !d->shutdown || !d->count || !d->device || !d->processes || init() != NVML_OK) {
		dlclose(d->lib);
		free(d);
		return VRT_E_UNSUPPORTED;
	}
	*out = d;
	return 0;
}

/* The processes on device dev into d->list, grown as the driver asks; false if not listed. */
static bool list_processes(struct vrt_driver_memory *d, nvml_device dev, unsigned int *n)
{
	for (int tries = 0; tries < 4; tries++) {
		*n = d->cap;
		int rc = d->processes(dev, n, d->list);
		if (rc == NVML_OK)
			return *n <= d->cap;
		if (rc != NVML_INSUFFICIENT_SIZE || *n > MAX_PROCESSES)
			return false;
		unsigned int cap = *n + 16 < MAX_PROCESSES ? *n + 16 : MAX_PROCESSES; /* room for newcomers */
		struct nvml_process *list = realloc(d->list, cap * sizeof(*list));
		if (!list)
			return false;
		d->list = list;
		d->cap = cap;
	}
	return false;
}

int vrt_driver_memory_of(struct vrt_driver_memory *d, int pid, uint64_t *bytes)
{
	unsigned int devices = 0;
	if (d->count(&devices) != NVML_OK)
		return VRT_E_UNSUPPORTED;
	bool listed = false, unknown = false;
	uint64_t sum = 0;
	for (unsigned int i = 0; i < devices && i < MAX_DEVICES; i++) {
		nvml_device dev;
		unsigned int n;
		if (d->device(i, &dev) != NVML_OK || !list_processes(d, dev, &n))
			continue;
		for (unsigned int k = 0; k < n; k++) {
			if (d->list[k].pid != (unsigned int)pid)
				continue;
			listed = true;
			if (d->list[k].used_bytes == NVML_NOT_AVAILABLE)
				unknown = true;
			else
				sum += d->list[k].used_bytes;
		}
	}
	if (!listed)
		return VRT_E_NOENT;
	if (unknown)
		return VRT_E_UNSUPPORTED;
	*bytes = sum;
	return 0;
}

void vrt_driver_memory_close(struct vrt_driver_memory *d)
{
	if (!d)
		return;
	d->shutdown();
	dlclose(d->lib);
	free(d->list);
	free(d);
}
