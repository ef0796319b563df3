/*
 * oom.c - runs out of device memory. Meant for FAKECUDA_TOTAL_BYTES=16M: big_site keeps 12 MiB,
 * then too_big_site asks for 8 MiB more, which must fail with cudaErrorMemoryAllocation; the
 * program reports that on stdout and carries on, as a program with a fallback would
 * (fallback_site takes 2 MiB instead).
 *
 * Expected: a failed record of 8388608 bytes with result 2, an oom record saying 4 MiB free of
 * 16 MiB; device 0, device: peak = live = 14 MiB.
 */
#include <cuda_runtime_api.h>

#include "prog.h"

SITE void big_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 12 * MiB));
}

SITE cudaError_t too_big_site(void)
{
	void *p = NULL;
	return cudaMalloc(&p, 8 * MiB);
}

SITE void fallback_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 2 * MiB));
}

int main(void)
{
	CHECK(cudaSetDevice(0));
	big_site();
	cudaError_t err = too_big_site();
	printf("too_big_site: %s\n", cudaGetErrorName(err));
	if (err != cudaErrorMemoryAllocation)
		return 3;
	cudaGetLastError();
	fallback_site();
	printf("oom: done\n");
	return 0;
}
