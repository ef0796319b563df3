/*
 * vmm_retained.c - VMM handles whose reference counts matter at exit, for the live-set agreement
 * test (tests/e2e/test_live_set_agreement.py): the exit checkpoint restates a handle's
 * references (CP_LIVE's `y`), which only a handle still referenced at exit shows.
 *
 *   kept_site:    a handle created, mapped, retained twice through its address and released
 *                 once: live at exit with 2 references and its mapping
 *   dropped_site: a handle created, retained, released twice, then unmapped: gone at the unmap
 *                 (its last reference went first), not at the second release
 */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#include "drv_prog.h"

static CUdeviceptr mapped_page(CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp prop = device_prop();
	CUdeviceptr va;
	CHECK(cuMemAddressReserve(&va, PAGE, 0, 0, 0));
	CHECK(cuMemCreate(h, PAGE, &prop, 0));
	CHECK(cuMemMap(va, PAGE, 0, *h, 0));
	return va;
}

SITE void kept_site(void)
{
	CUmemGenericAllocationHandle h, again;
	CUdeviceptr va = mapped_page(&h);
	CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va));
	CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va));
	CHECK(cuMemRelease(h));
}

SITE void dropped_site(void)
{
	CUmemGenericAllocationHandle h, again;
	CUdeviceptr va = mapped_page(&h);
	CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va));
	CHECK(cuMemRelease(h));
	CHECK(cuMemRelease(again));
	CHECK(cuMemUnmap(va, PAGE));
	CHECK(cuMemAddressFree(va, PAGE));
}

int main(void)
{
	use_primary_context();
	kept_site();
	dropped_site();
	printf("vmm_retained: done\n");
	return 0;
}
