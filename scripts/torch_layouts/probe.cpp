// SPDX-License-Identifier: MIT
// What preload/torch.c relies on in one PyTorch release, as that release's own headers say:
// compiled by generate.py against the wheel's torch/include (never built by meson), it prints
// "key value" lines. A virtual member function pointer (Itanium C++ ABI) holds 1 + the byte
// offset of its slot from the vtable's address point, with this-adjustment 0 for a primary base.
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>

namespace A = c10::cuda::CUDACachingAllocator;
using Alloc = A::CUDAAllocator;
// StatType moved from the CUDA allocator's namespace to c10's (2.x); opening an empty namespace
// is harmless, so one name finds it wherever this release keeps it.
namespace c10::CachingAllocator {}
namespace c10::CachingDeviceAllocator {}
namespace names {
using namespace c10::cuda::CUDACachingAllocator;
using namespace c10::CachingAllocator;
using namespace c10::CachingDeviceAllocator;
} // namespace names

template <class M> static long slot(M m)
{
	static_assert(sizeof(m) == 2 * sizeof(void *), "Itanium member function pointer");
	struct {
		uintptr_t ptr;
		ptrdiff_t adj;
	} r;
	std::memcpy(&r, &m, sizeof(r));
	if (!(r.ptr & 1) || r.adj)
		return -1; /* not virtual, or not in the primary vtable */
	return (long)((r.ptr - 1) / sizeof(void *));
}

template <class> struct fn;
template <class R, class C, class... Args> struct fn<R (C::*)(Args...)> {
	using ret = R;
	using args = std::tuple<Args...>;
};

template <class T, class = void> struct has_tracker : std::false_type {};
template <class T>
struct has_tracker<T, std::void_t<decltype(&T::attachAllocatorTraceTracker)>> : std::true_type {};
template <class T, class = void> struct has_device : std::false_type {};
template <class T> struct has_device<T, std::void_t<decltype(std::declval<T &>().device_)>> : std::true_type {};

#pragma GCC diagnostic ignored "-Winvalid-offsetof"

// Templates, so that what a release lacks is discarded rather than compiled (if constexpr).
template <class T> static void tracker()
{
	if constexpr (has_tracker<T>::value) {
		using M = decltype(&T::attachAllocatorTraceTracker);
		using Arg = std::tuple_element_t<0, typename fn<M>::args>;
		constexpr bool sig = std::tuple_size_v<typename fn<M>::args> == 1 &&
				     std::is_same_v<typename fn<M>::ret, void> &&
				     std::is_same_v<Arg, std::function<void(const A::TraceEntry &)>>;
		std::printf("slot.attach_tracker %ld\n", sig ? slot(&T::attachAllocatorTraceTracker) : -2);
		std::printf("sizeof.std_function %zu\n", sizeof(Arg));
	} else {
		std::printf("slot.attach_tracker -1\n");
	}
}

template <class E> static void entry()
{
	std::printf("entry.action %zu\n", offsetof(E, action_));
	std::printf("entry.action_size %zu\n", sizeof(E::action_));
	if constexpr (has_device<E>::value) {
		std::printf("entry.device %zu\n", offsetof(E, device_));
		std::printf("entry.device_size %zu\n", sizeof(E::device_));
	} else {
		std::printf("entry.device -1\nentry.device_size 0\n");
	}
	std::printf("entry.addr %zu\n", offsetof(E, addr_));
	std::printf("entry.stream %zu\n", offsetof(E, stream_));
	std::printf("entry.size %zu\n", offsetof(E, size_));
	std::printf("action.alloc %d\n", (int)E::ALLOC);
	std::printf("action.free_requested %d\n", (int)E::FREE_REQUESTED);
	std::printf("action.free_completed %d\n", (int)E::FREE_COMPLETED);
	std::printf("action.oom %d\n", (int)E::OOM);
}

static void stats()
{
	using S = std::invoke_result_t<decltype(&Alloc::getDeviceStats), Alloc *, int>;
	using M = decltype(&Alloc::getDeviceStats);
	using Arg = std::tuple_element_t<0, typename fn<M>::args>;
	constexpr bool sig = std::tuple_size_v<typename fn<M>::args> == 1 && std::is_integral_v<Arg> &&
			     std::is_signed_v<Arg> && sizeof(Arg) <= sizeof(int);
	S s{};
	const size_t agg = static_cast<size_t>(names::StatType::AGGREGATE);
	auto at = [&](const void *p) { return (long)((const char *)p - (const char *)&s); };
	std::printf("slot.get_device_stats %ld\n", sig ? slot(&Alloc::getDeviceStats) : -2);
	std::printf("stats.size %zu\n", sizeof(S));
	std::printf("stats.trivially_copyable %d\n", (int)std::is_trivially_copyable_v<S>);
	std::printf("stats.alloc_count %ld\n", at(&s.allocation[agg].allocated));
	std::printf("stats.alloc_bytes %ld\n", at(&s.allocated_bytes[agg].allocated));
	std::printf("stats.freed_bytes %ld\n", at(&s.allocated_bytes[agg].freed));
	std::printf("stats.counter_size %zu\n", sizeof(s.allocation[agg].allocated));
}

int main()
{
	using I = decltype(&Alloc::initialized);
	constexpr bool sig = std::tuple_size_v<typename fn<I>::args> == 0 && std::is_same_v<typename fn<I>::ret, bool>;
	std::printf("slot.initialized %ld\n", sig ? slot(&Alloc::initialized) : -2);
	std::printf("allocator.atomic_pointer %d\n",
		    (int)std::is_same_v<decltype(A::allocator), std::atomic<Alloc *>>);
	stats();
	tracker<Alloc>();
	entry<A::TraceEntry>();
	return 0;
}
