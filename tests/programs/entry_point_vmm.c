/*
 * entry_point_vmm.c - PyTorch's expandable segments, in miniature: the driver's VMM functions
 * are fetched through the runtime with cudaGetDriverEntryPointByVersion (the program links only
 * libcudart), a large range is reserved once, and the segment grows and shrinks by mapping and
 * unmapping 2 MiB pages (unmap first, then release: the other common order).
 *
 * Expected: device 0, device: peak 6 MiB (three pages after segment_grow), live 4 MiB (two
 * pages left mapped at exit, both from segment_grow); plus cudaMalloc'd 1 MiB freed by
 * plain_site before the segment exists, so the peak stays 6 MiB.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "prog.h"

#define PAGE (2 * MiB)
#define MAX_PAGES 16

static struct {
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*release)(CUmemGenericAllocationHandle);
} drv;

static CUdeviceptr base;
static CUmemGenericAllocationHandle pages[MAX_PAGES];
static int mapped;

static void entry(const char *name, void **fn)
{
	enum cudaDriverEntryPointQueryResult status;
	CHECK(cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &status));
	if (status != cudaDriverEntryPointSuccess || !*fn) {
		fprintf(stderr, "no entry point %s\n", name);
		exit(3);
	}
}

SITE void plain_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
	CHECK(cudaFree(p));
}

SITE void segment_grow(int n)
{
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	CUmemAccessDesc access;
	memset(&access, 0, sizeof(access));
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	for (int i = 0; i < n; i++, mapped++) {
		CHECK(drv.create(&pages[mapped], PAGE, &prop, 0));
		CHECK(drv.map(base + (CUdeviceptr)mapped * PAGE, PAGE, 0, pages[mapped], 0));
		CHECK(drv.set_access(base + (CUdeviceptr)mapped * PAGE, PAGE, &access, 1));
	}
}

SITE void segment_shrink(int n)
{
	for (int i = 0; i < n; i++) {
		mapped--;
		CHECK(drv.unmap(base + (CUdeviceptr)mapped * PAGE, PAGE));
		CHECK(drv.release(pages[mapped]));
	}
}

int main(void)
{
	CHECK(cudaSetDevice(0));
	entry("cuMemAddressReserve", (void **)&drv.reserve);
	entry("cuMemCreate", (void **)&drv.create);
	entry("cuMemMap", (void **)&drv.map);
	entry("cuMemSetAccess", (void **)&drv.set_access);
	entry("cuMemUnmap", (void **)&drv.unmap);
	entry("cuMemRelease", (void **)&drv.release);
	plain_site();
	CHECK(drv.reserve(&base, MAX_PAGES * PAGE, 0, 0, 0));
	segment_grow(3);
	segment_shrink(1);
	printf("entry_point_vmm: done\n");
	return 0;
}
