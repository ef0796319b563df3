/*
 * fake_nvml.c - GPU-free test double of NVML, built as libnvidia-ml.so.1: the entry points
 * vramtrace's analyzer uses (analyzer/driver_memory.c), with NVML's C ABI.
 *
 * FAKE_NVML_DIR=DIR names the processes on the one device: every file DIR/<pid> holds the
 * bytes the driver double counts for that process (fake_cuda.c writes it), or the word "n/a"
 * for NVML's "not available". Without FAKE_NVML_DIR, nvmlInit_v2 fails as it does on a
 * machine without a driver. FAKE_NVML_EXTRA=BYTES adds BYTES to every process's figure, as a
 * context and its modules do.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum { OK = 0, ERROR_INVALID_ARGUMENT = 2, ERROR_INSUFFICIENT_SIZE = 7, ERROR_DRIVER_NOT_LOADED = 9 };

struct process_info {
	unsigned int pid;
	unsigned long long used_bytes;
	unsigned int gpu_instance, compute_instance;
};

static const char *dir(void)
{
	const char *d = getenv("FAKE_NVML_DIR");
	return d && d[0] ? d : NULL;
}

EXPORT int nvmlInit_v2(void) { return dir() ? OK : ERROR_DRIVER_NOT_LOADED; }
EXPORT int nvmlShutdown(void) { return OK; }

EXPORT int nvmlDeviceGetCount_v2(unsigned int *count)
{
	*count = 1;
	return OK;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device)
{
	static int the_device;
	if (index != 0)
		return ERROR_INVALID_ARGUMENT;
	*device = &the_device;
	return OK;
}

/* One process's entry from DIR/<name>; 0 if the name is not a process's. */
static int read_process(const char *d, const char *name, struct process_info *p)
{
	char *end;
	long pid = strtol(name, &end, 10);
	if (*end || pid <= 0)
		return 0;
	char path[4096], text[64] = "";
	snprintf(path, sizeof(path), "%s/%s", d, name);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = 0;
	const char *extra = getenv("FAKE_NVML_EXTRA");
	*p = (struct process_info){ .pid = (unsigned int)pid };
	p->used_bytes = strstr(text, "n/a") ? ~0ull : strtoull(text, NULL, 10) + (extra ? strtoull(extra, NULL, 10) : 0);
	return 1;
}

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, struct process_info *infos)
{
	(void)device;
	const char *d = dir();
	DIR *dp = d ? opendir(d) : NULL;
	unsigned int n = 0, cap = *count;
	for (struct dirent *e; dp && (e = readdir(dp));) {
		struct process_info p;
		if (!read_process(d, e->d_name, &p))
			continue;
		if (n < cap)
			infos[n] = p;
		n++;
	}
	if (dp)
		closedir(dp);
	*count = n;
	return n > cap ? ERROR_INSUFFICIENT_SIZE : OK;
}
