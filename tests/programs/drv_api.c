/*
 * drv_api.c - the driver API called directly by a program linked against libcuda.so.1 (the
 * driver double): linear, managed, stream-ordered (plain and per-thread-default-stream, the
 * latter fetched with cuGetProcAddress), pinned host memory, and the whole virtual memory
 * management family, including a handle released while still mapped and a retained handle.
 *
 * Expected totals (tests/e2e/test_driver.py has the same numbers):
 *   device 0, device:   live 1 MiB (leak_site) + 4096 (async_leak_site) + 2 MiB (vmm_leak_site)
 *                       peak 5 MiB + 4096: leak + async + the two 2 MiB pages of vmm_site
 *   device 0, managed:  peak 1 MiB, live 0
 *   host, host_pinned:  peak 24576 (8K kept + 16K registered), live 8 KiB (pinned_site)
 */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#include "drv_prog.h"

SITE void leak_site(void)
{
	CUdeviceptr p;
	CHECK(cuMemAlloc(&p, 1 * MiB));
}

SITE void transient_site(void)
{
	CUdeviceptr p;
	CHECK(cuMemAlloc(&p, 2 * MiB));
	CHECK(cuMemFree(p));
}

SITE void managed_site(void)
{
	CUdeviceptr p;
	CHECK(cuMemAllocManaged(&p, 1 * MiB, CU_MEM_ATTACH_GLOBAL));
	CHECK(cuMemFree(p));
}

SITE void async_leak_site(void)
{
	CUdeviceptr p;
	CHECK(cuMemAllocAsync(&p, 4096, NULL));
}

/* The legacy-stream free, as a static runtime's cudaFreeAsync reaches the driver. */
SITE void async_free_site(void)
{
	CUdeviceptr p;
	CHECK(cuMemAllocAsync(&p, 12288, NULL));
	CHECK(cuMemFreeAsync(p, NULL));
}

/* How a per-thread-default-stream build reaches the driver: the _ptsz variants. */
SITE void ptsz_site(void)
{
	CUresult (*alloc)(CUdeviceptr *, size_t, CUstream);
	CUresult (*release)(CUdeviceptr, CUstream);
	CUdriverProcAddressQueryResult status;
	CHECK(cuGetProcAddress("cuMemAllocAsync", (void **)&alloc, 12000,
			       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
	CHECK(cuGetProcAddress("cuMemFreeAsync", (void **)&release, 12000,
			       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
	CUdeviceptr p;
	CHECK(alloc(&p, 8192, CU_STREAM_PER_THREAD));
	CHECK(release(p, CU_STREAM_PER_THREAD));
}

SITE void pinned_site(void)
{
	void *kept, *gone;
	static char registered[16384] __attribute__((aligned(4096)));
	CHECK(cuMemAllocHost(&kept, 8192));
	CHECK(cuMemHostAlloc(&gone, 4096, CU_MEMHOSTALLOC_PORTABLE));
	CHECK(cuMemFreeHost(gone));
	CHECK(cuMemHostRegister(registered, sizeof(registered), 0));
	CHECK(cuMemHostUnregister(registered));
}

static void set_access(CUdeviceptr va, size_t size)
{
	CUmemAccessDesc access;
	memset(&access, 0, sizeof(access));
	access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	access.location.id = 0;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CHECK(cuMemSetAccess(va, size, &access, 1));
}

/* Two pages mapped side by side, both handles released while still mapped (the usual order:
 * the mapping keeps the memory), one of them retained and released again through its address,
 * then one unmap over both mappings frees the memory, and the reservation goes. */
SITE void vmm_site(void)
{
	CUmemAllocationProp prop = device_prop();
	CUdeviceptr va;
	CUmemGenericAllocationHandle first, second, again;
	CHECK(cuMemAddressReserve(&va, 4 * PAGE, 0, 0, 0));
	CHECK(cuMemCreate(&first, PAGE, &prop, 0));
	CHECK(cuMemCreate(&second, PAGE, &prop, 0));
	CHECK(cuMemMap(va, PAGE, 0, first, 0));
	CHECK(cuMemMap(va + PAGE, PAGE, 0, second, 0));
	set_access(va, 2 * PAGE);
	memset((void *)(uintptr_t)va, 0x5a, 2 * PAGE);
	CHECK(cuMemRelease(first));
	CHECK(cuMemRelease(second));
	CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va));
	if (again != first) {
		fprintf(stderr, "retained handle differs\n");
		exit(3);
	}
	CHECK(cuMemRelease(again));
	CHECK(cuMemUnmap(va, 2 * PAGE));
	CHECK(cuMemAddressFree(va, 4 * PAGE));
}

/* One page left mapped at exit: its memory is live at the end. */
SITE void vmm_leak_site(void)
{
	CUmemAllocationProp prop = device_prop();
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;
	CHECK(cuMemAddressReserve(&va, PAGE, 0, 0, 0));
	CHECK(cuMemCreate(&h, PAGE, &prop, 0));
	CHECK(cuMemMap(va, PAGE, 0, h, 0));
	CHECK(cuMemRelease(h));
	set_access(va, PAGE);
}

int main(void)
{
	use_primary_context();
	leak_site();
	transient_site();
	managed_site();
	async_leak_site();
	ptsz_site();
	pinned_site();
	vmm_site();
	vmm_leak_site();
	async_free_site(); /* last: no later allocation takes its address (the doubles reuse them) */
	printf("drv_api: done\n");
	return 0;
}
