// SPDX-License-Identifier: MIT
// One release's caching allocator driven directly, no Python: compiled against the release's
// headers and linked with its libc10_cuda.so by gpu_bundle.sh, run on a GPU under
// `vramtrace run` (gpu_run.sh). Allocates blocks of assorted sizes through the allocator's own
// raw_alloc, frees some, and prints what the allocator itself counts, for the trace's tensor
// layer to be compared with.
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdio>
#include <vector>

namespace A = c10::cuda::CUDACachingAllocator;

int main()
{
	A::CUDAAllocator *a = A::get();
	a->init(1);
	const size_t sizes[] = { 1, 512, 1000, 4096, 1 << 20, (1 << 20) + 1, 3 << 20, 10 << 20, 25 << 20 };
	std::vector<void *> kept;
	for (size_t s : sizes)
		kept.push_back(a->raw_alloc(s));
	a->raw_delete(kept[1]);
	a->raw_delete(kept[4]);
	void *last = a->raw_alloc(777); /* its free settles the sizes still pending */
	a->raw_delete(last);
	auto st = a->getDeviceStats(0);
	std::printf("VRAMTRACE_TRUTH {\"allocated\": %lld, \"reserved\": %lld, \"blocks\": %lld, \"allocs\": %lld}\n",
		    (long long)st.allocated_bytes[0].current, (long long)st.reserved_bytes[0].current,
		    (long long)st.allocation[0].current, (long long)st.allocation[0].allocated);
	return 0;
}
