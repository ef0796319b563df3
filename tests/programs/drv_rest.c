/*
 * drv_rest.c - the driver calls drv_api.c does not make, linked against the driver double:
 * pitched memory, memory pools (plain and per-thread-default-stream), IPC and shareable-handle
 * imports (someone else's memory: recorded, not held), and a primary context reset, which
 * takes every device allocation of that context with it (and no pinned host memory).
 *
 * Expected (tests/e2e/test_driver.py has the same numbers):
 *   before the reset, device 0 holds pitch_site 10240 (pitch 1024 x 10 rows) + pool_site 8192 +
 *     reset_victim_site 3 MiB, and for a moment shareable_site's 2 MiB handle: the device peak;
 *     ptsz_pool_site's 4096 comes and goes first
 *   after it: only after_reset_site 1 MiB; host pinned: pinned_site 4096, live to the end
 *   imports: ipc_site opens and closes reset_victim_site's buffer (3 MiB), shareable_site
 *     imports a 2 MiB handle by its file descriptor
 */
#include <cuda.h>
#include <string.h>
#include <unistd.h>

#include "drv_prog.h"

static CUdeviceptr victim;

SITE void pitch_site(void)
{
	CUdeviceptr p;
	size_t pitch = 0;
	CHECK(cuMemAllocPitch(&p, &pitch, 1000, 10, 4));
	if (pitch != 1024) {
		fprintf(stderr, "unexpected pitch %zu\n", pitch);
		exit(3);
	}
}

static CUmemoryPool make_pool(void)
{
	CUmemPoolProps props;
	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = 0;
	CUmemoryPool pool;
	CHECK(cuMemPoolCreate(&pool, &props));
	return pool;
}

SITE void pool_site(CUmemoryPool pool)
{
	CUdeviceptr p;
	CHECK(cuMemAllocFromPoolAsync(&p, 8192, pool, NULL));
}

SITE void ptsz_pool_site(CUmemoryPool pool)
{
	CUresult (*alloc)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*release)(CUdeviceptr, CUstream);
	CUdriverProcAddressQueryResult status;
	CHECK(cuGetProcAddress("cuMemAllocFromPoolAsync", (void **)&alloc, 12000,
			       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
	CHECK(cuGetProcAddress("cuMemFreeAsync", (void **)&release, 12000,
			       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
	CUdeviceptr p;
	CHECK(alloc(&p, 4096, pool, CU_STREAM_PER_THREAD));
	CHECK(release(p, CU_STREAM_PER_THREAD));
}

SITE void pinned_site(void)
{
	void *p;
	CHECK(cuMemAllocHost(&p, 4096));
}

SITE void reset_victim_site(void) { CHECK(cuMemAlloc(&victim, 3 * MiB)); }

SITE void ipc_site(void)
{
	CUipcMemHandle h;
	CUdeviceptr opened;
	CHECK(cuIpcGetMemHandle(&h, victim));
	CHECK(cuIpcOpenMemHandle(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CHECK(cuIpcCloseMemHandle(opened));
}

SITE void shareable_site(void)
{
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CUmemGenericAllocationHandle mine, theirs;
	CHECK(cuMemCreate(&mine, 2 * MiB, &prop, 0));
	int fd = -1;
	CHECK(cuMemExportToShareableHandle(&fd, mine, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK(cuMemImportFromShareableHandle(&theirs, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	CHECK(cuMemRelease(theirs));
	CHECK(cuMemRelease(mine));
}

SITE void after_reset_site(void)
{
	CUdeviceptr p;
	CHECK(cuMemAlloc(&p, 1 * MiB));
}

int main(void)
{
	CUdevice dev = use_primary_context();
	CUcontext ctx;
	CUmemoryPool pool = make_pool();
	pitch_site();
	ptsz_pool_site(pool);
	pool_site(pool);
	pinned_site();
	reset_victim_site();
	ipc_site();
	shareable_site();
	CHECK(cuDevicePrimaryCtxReset(dev));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	after_reset_site();
	printf("drv_rest: done\n");
	return 0;
}
