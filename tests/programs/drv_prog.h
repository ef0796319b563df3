/*
 * drv_prog.h - shared by the test programs that call the driver API (drv_api.c, drv_rest.c,
 * vmm_retained.c): the double's VMM granularity, a device allocation's properties, and the
 * primary context made current.
 */
#ifndef VRT_TEST_DRV_PROG_H
#define VRT_TEST_DRV_PROG_H

#include <cuda.h>
#include <string.h>

#include "prog.h"

#define PAGE (2 * MiB) /* the double's VMM granularity */

static inline CUmemAllocationProp device_prop(void)
{
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	return prop;
}

/* Returns the device whose primary context is now current (device 0). */
static inline CUdevice use_primary_context(void)
{
	CUdevice dev;
	CUcontext ctx;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	return dev;
}

#endif /* VRT_TEST_DRV_PROG_H */
