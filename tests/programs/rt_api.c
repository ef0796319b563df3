/*
 * rt_api.c - every allocation API of the shared CUDA runtime (libcudart.so.13), each from its own
 * named function. Linked against the runtime double; the runtime reaches the driver double
 * through dlopen + cuGetProcAddress like the real one.
 *
 * What it leaves live at exit, and the peaks (tests/e2e/test_runtime.py has the same numbers):
 *   device 0, device:      peak 4 MiB (leak_site 1 MiB + transient_site 3 MiB)
 *                          live 1 MiB (leak_site) + 10240 (pitch_site) + 8192 (pool_site)
 *   device 0, managed:     peak = live = 2 MiB (managed_site)
 *   host, host_pinned:     peak 81920 (64K + 16K registered), live 64 KiB (pinned_site)
 * Imports (IPC) are reported apart from memory held: ipc_site opens and closes the 1 MiB buffer.
 * zero_size_site's cudaMalloc of 0 bytes allocates nothing and must leave no record.
 */
#include <cuda_runtime_api.h>
#include <string.h>

#include "prog.h"

static void *leaked_device;

SITE void leak_site(void) { CHECK(cudaMalloc(&leaked_device, 1 * MiB)); }

SITE void transient_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 3 * MiB));
	CHECK(cudaMemset(p, 0, 3 * MiB));
	CHECK(cudaFree(p));
}

SITE void pitch_site(void)
{
	void *p;
	size_t pitch = 0;
	CHECK(cudaMallocPitch(&p, &pitch, 1000, 10)); /* pitch 1024: 10240 bytes, kept */
	if (pitch != 1024) {
		fprintf(stderr, "unexpected pitch %zu\n", pitch);
		exit(3);
	}
}

SITE void malloc3d_site(void)
{
	struct cudaPitchedPtr pp;
	struct cudaExtent extent = { 100, 4, 3 }; /* pitch 512 x 12 rows = 6144 bytes, freed */
	CHECK(cudaMalloc3D(&pp, extent));
	CHECK(cudaFree(pp.ptr));
}

SITE void async_site(void)
{
	void *p;
	CHECK(cudaMallocAsync(&p, 4096, 0));
	CHECK(cudaFreeAsync(p, 0));
}

SITE void pool_site(void)
{
	cudaMemPool_t pool;
	struct cudaMemPoolProps props;
	void *kept, *gone;
	memset(&props, 0, sizeof(props));
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 0;
	CHECK(cudaMemPoolCreate(&pool, &props));
	CHECK(cudaMallocFromPoolAsync(&kept, 8192, pool, 0));
	CHECK(cudaMallocFromPoolAsync(&gone, 2048, pool, 0));
	CHECK(cudaFreeAsync(gone, 0));
}

SITE void managed_site(void)
{
	void *p;
	CHECK(cudaMallocManaged(&p, 2 * MiB, cudaMemAttachGlobal));
}

SITE void pinned_site(void)
{
	void *kept, *gone;
	static char registered[16384] __attribute__((aligned(4096)));
	CHECK(cudaMallocHost(&kept, 64 * KiB));
	CHECK(cudaHostAlloc(&gone, 12288, cudaHostAllocDefault));
	CHECK(cudaFreeHost(gone));
	CHECK(cudaHostRegister(registered, sizeof(registered), cudaHostRegisterDefault));
	CHECK(cudaHostUnregister(registered));
}

/* CUDA's cudaMalloc(&p, 0) succeeds and returns NULL: no allocation, nothing to record. */
SITE void zero_size_site(void)
{
	void *p = &p;
	CHECK(cudaMalloc(&p, 0));
	if (p) {
		fprintf(stderr, "cudaMalloc(0) gave %p\n", p);
		exit(3);
	}
	CHECK(cudaFree(p));
}

SITE void ipc_site(void)
{
	cudaIpcMemHandle_t h;
	void *opened;
	CHECK(cudaIpcGetMemHandle(&h, leaked_device));
	CHECK(cudaIpcOpenMemHandle(&opened, h, cudaIpcMemLazyEnablePeerAccess));
	CHECK(cudaIpcCloseMemHandle(opened));
}

int main(void)
{
	CHECK(cudaSetDevice(0));
	leak_site();
	transient_site();
	pitch_site();
	malloc3d_site();
	async_site();
	pool_site();
	managed_site();
	pinned_site();
	ipc_site();
	zero_size_site();
	printf("rt_api: done\n");
	return 0;
}
