// Built by nvcc with its default static cudart: no libcudart.so, the driver is reached through
// dlopen("libcuda.so.1") + cuGetProcAddress. Allocates known sizes and prints their sum.
#include <cstdio>
#include <cuda_runtime.h>
#include <dlfcn.h>

int main()
{
	const size_t sizes[] = { 1 << 20, (3 << 20) + 17, 64 << 20 };
	void *p[3];
	size_t total = 0;
	for (int i = 0; i < 3; i++) {
		if (cudaMalloc(&p[i], sizes[i]) != cudaSuccess)
			return 1;
		total += sizes[i];
	}
	void *h;
	cudaMallocHost(&h, 1 << 20);
	typedef void (*mark_fn)(const char *);
	mark_fn mark = (mark_fn)dlsym(RTLD_DEFAULT, "vramtrace_mark");
	if (mark)
		mark("vramtrace-truth");
	printf("VRAMTRACE_TRUTH {\"mode\": \"static-binary\", \"device_bytes\": %zu, \"pinned_bytes\": %d}\n", total, 1 << 20);
	return 0;
}
