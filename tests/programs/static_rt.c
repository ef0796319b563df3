/*
 * static_rt.c - linked against libcudart_static.a (the runtime double's static build), like
 * most CUDA binaries built by nvcc: the runtime functions are inside the executable, so no
 * runtime hook can see them; the runtime's own driver lookups (dlopen + cuGetProcAddress) are
 * what vramtrace must catch, and the records name the driver API.
 *
 * Expected: device 0, device: peak 3 MiB (leak_site 1 MiB + transient_site 2 MiB), live 1 MiB;
 *           host, host_pinned: peak = live = 8192 (pinned_site).
 */
#include <cuda_runtime_api.h>

#include "prog.h"

SITE void leak_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 1 * MiB));
}

SITE void transient_site(void)
{
	void *p;
	CHECK(cudaMalloc(&p, 2 * MiB));
	CHECK(cudaFree(p));
}

SITE void pinned_site(void)
{
	void *p;
	CHECK(cudaMallocHost(&p, 8192));
}

int main(void)
{
	CHECK(cudaSetDevice(0));
	leak_site();
	transient_site();
	pinned_site();
	printf("static_rt: done\n");
	return 0;
}
