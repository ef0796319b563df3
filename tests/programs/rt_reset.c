/*
 * rt_reset.c - cudaDeviceReset through the shared runtime: every allocation of the device goes
 * with its context, pinned host memory stays (tests/e2e/test_runtime.py).
 *
 * Expected: device 0 peak 2 MiB (before_reset_site), live 1 MiB (after_reset_site); host pinned
 * 4 KiB (pinned_site), live to the end.
 */
#include <cuda_runtime_api.h>

#include "prog.h"

SITE void before_reset_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 2 * MiB));
}

SITE void pinned_site(void)
{
	void *p;
	CHECK(cudaMallocHost(&p, 4 * KiB));
}

SITE void after_reset_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
}

int main(void)
{
	CHECK(cudaSetDevice(0));
	before_reset_site();
	pinned_site();
	CHECK(cudaDeviceReset());
	after_reset_site();
	printf("rt_reset: done\n");
	return 0;
}
