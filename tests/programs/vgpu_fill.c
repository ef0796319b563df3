/*
 * vgpu_fill.c - allocates device memory in 1 MiB pieces until the allocator refuses (at most
 * 32), keeps two of them and frees the rest; then 4 KiB of pinned host memory. Run under
 * tests/programs/shim_vgpu.c with a limit, the count is the shim's to decide: a tracer that
 * bypassed the shim would change it.
 *
 * Output: "vgpu_fill: allocated=N refused=R kept=2097152 pinned=4096"
 * Expected trace: device 0 device peak N MiB, live 2 MiB; host_pinned peak = live = 4096;
 * R failed allocations (out of memory).
 */
#include <cuda_runtime_api.h>

#include "prog.h"

#define MAX_PIECES 32

static void *piece[MAX_PIECES];

SITE int fill_site(int i) { return cudaMalloc(&piece[i], 1 * MiB); }

SITE void pinned_site(void)
{
	void *p;
	CHECK(cudaMallocHost(&p, 4096));
}

int main(void)
{
	CHECK(cudaSetDevice(0));
	int n = 0, refused = 0;
	while (n < MAX_PIECES) {
		int rc = fill_site(n);
		if (rc == cudaErrorMemoryAllocation) {
			refused++;
			break;
		}
		CHECK(rc);
		n++;
	}
	for (int i = 2; i < n; i++)
		CHECK(cudaFree(piece[i]));
	pinned_site();
	printf("vgpu_fill: allocated=%d refused=%d kept=%zu pinned=4096\n", n, refused, (n < 2 ? n : 2) * MiB);
	return 0;
}
