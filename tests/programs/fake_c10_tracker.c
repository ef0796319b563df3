/*
 * fake_c10_tracker.c - a stand-in for PyTorch 2.11's libc10_cuda.so that preload/torch.c can
 * attach its tracker to, for an attached job's tensors on the test double (tests/e2e/
 * test_attach.py builds it as torch/lib/libc10_cuda.so beside a torch/version.py of 2.11.0).
 * As tests/unit/fake_c10_cuda.c, it has the exported allocator object and NativeCachingAllocator's
 * vtable under the real names in the 2.11 row's slots; here the three methods work: the allocator
 * is initialized, attachAllocatorTraceTracker keeps the std::function, getDeviceStats reports the
 * counters. The stand-in torch (tests/programs/pylib_faketorch) calls fake_c10_trace for each
 * block it hands out or takes back, as PyTorch's allocator records a TraceEntry.
 */
#include <stdint.h>
#include <string.h>

#include "fake_c10_2_11.h"

/* libstdc++'s std::function<void(const TraceEntry&)>: 16 bytes of functor, manager, invoker. */
struct std_function {
	void *functor[2];
	int (*manager)(void *dest, const void *src, int op);
	void (*invoker)(const void *functor, const void *entry);
};

static struct std_function tracker;
static bool tracking;
/* Each device's, as DeviceStats aggregates them (cumulative: reset only by
 * fake_c10_reset_accumulated). */
#define DEVICES 8
static uint64_t alloc_count[DEVICES], alloc_bytes[DEVICES];
static uint64_t stats_reads; /* getDeviceStats calls, for a test to count */
/* What another thread does while the next getDeviceStats call returns (its figures already
 * copied): a reset of the statistics, then an allocation (fake_c10_during_next_stats_read). */
static struct {
	bool armed;
	uint64_t addr, requested, block;
} during_read;

EXPORT void fake_c10_trace(int action, uint64_t addr, uint64_t requested, uint64_t block, uint64_t stream);
EXPORT void fake_c10_reset_accumulated(void);

bool initialized(void *self) { return self != NULL; }

/* sret: DeviceStats (976 bytes in 2.11); the aggregate StatType's allocation count at 16 and
 * allocated bytes at 400, the counters torch.c reads. */
void get_device_stats(void *out, void *self, signed char device)
{
	(void)self;
	stats_reads++;
	memset(out, 0, 976);
	if (device < 0 || device >= DEVICES)
		return;
	memcpy((char *)out + 16, &alloc_count[device], 8);
	memcpy((char *)out + 400, &alloc_bytes[device], 8);
	if (during_read.armed) {
		during_read.armed = false;
		fake_c10_reset_accumulated();
		fake_c10_trace(0, during_read.addr, during_read.requested, during_read.block, 0);
	}
}

void attach_tracker(void *self, void *fn)
{
	(void)self;
	memcpy(&tracker, fn, sizeof(tracker)); /* torch.c's functor: clone is a copy */
	tracking = true;
}

EXPORT void *allocator __asm__(NS "9allocatorE") = &native;

/*
 * One TraceEntry on a device (2.11: action int at 0, device index at 4, addr at 8, stream at 32,
 * size at 40; ALLOC 0, FREE_REQUESTED 1, FREE_COMPLETED 2, SEGMENT_ALLOC 3), to the tracker if
 * one is attached. As in PyTorch, an allocation is traced before the allocation counters move;
 * the other actions move neither of them.
 */
EXPORT void fake_c10_trace_on(int device, int action, uint64_t addr, uint64_t requested, uint64_t block,
			      uint64_t stream)
{
	if (device < 0 || device >= DEVICES)
		return;
	unsigned char entry[64] = { 0 };
	entry[4] = (unsigned char)device; /* c10::DeviceIndex, one byte */
	memcpy(entry, &action, 4);
	memcpy(entry + 8, &addr, 8);
	memcpy(entry + 32, &stream, 8);
	memcpy(entry + 40, action == 0 ? &requested : &block, 8);
	if (tracking)
		tracker.invoker(tracker.functor, entry);
	if (action == 0) {
		alloc_count[device]++;
		alloc_bytes[device] += block;
	}
}

EXPORT void fake_c10_trace(int action, uint64_t addr, uint64_t requested, uint64_t block, uint64_t stream)
{
	fake_c10_trace_on(0, action, addr, requested, block, stream);
}

/* torch.cuda.reset_accumulated_memory_stats(): every Stat's allocated (and freed) go to 0. */
EXPORT void fake_c10_reset_accumulated(void)
{
	memset(alloc_count, 0, sizeof(alloc_count));
	memset(alloc_bytes, 0, sizeof(alloc_bytes));
}

EXPORT uint64_t fake_c10_stats_reads(void) { return stats_reads; }

/* Arms the next getDeviceStats call's race (once): as it returns, the statistics are reset and
 * a block at addr is allocated, traced (the tracker runs nested, on this thread). */
EXPORT void fake_c10_during_next_stats_read(uint64_t addr, uint64_t requested, uint64_t block)
{
	during_read.addr = addr;
	during_read.requested = requested;
	during_read.block = block;
	during_read.armed = true;
}
