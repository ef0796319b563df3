/* SPDX-License-Identifier: MIT */
/*
 * preload/torch_layout.c: which row a torch/version.py string selects, and the check of a row
 * against a loaded library, on fake_c10_cuda.so (2.11's layout under the real names). Corrupted
 * rows must each be refused, with a reason, before anything is called.
 *
 *     test_torch_layout PATH/TO/fake_c10_cuda.so
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "torch_layout.h"
#include "vt.h"

static const char *lib;
static void *handle;

static const char *release_of(const char *version)
{
	const struct vrt_torch_layout *r = vrt_torch_layout_find(version);
	return r ? r->release : "none";
}

static void test_rows_are_chosen_by_release_then_minor_series(void)
{
	VT_CHECK(!strcmp(release_of("2.11.0+cu130"), "2.11.0"));
	VT_CHECK(!strcmp(release_of("2.4.1"), "2.4.1"));
	VT_CHECK(!strcmp(release_of("2.4.0+cu121"), "2.4.0"));
	VT_CHECK(!strcmp(release_of("2.4.7"), "2.4.1")); /* an unknown patch: its series' newest */
	VT_CHECK(!strcmp(release_of("2.12.0a0+git1234"), "2.12.0"));
	VT_CHECK(!strcmp(release_of("2.9"), "2.9.0"));
	VT_CHECK(!strcmp(release_of("2.99.0"), "none"));
	VT_CHECK(!strcmp(release_of("1.13.1"), "none"));
	VT_CHECK(!strcmp(release_of("2."), "none"));
	VT_CHECK(!strcmp(release_of("x2.11.0"), "none"));
	VT_CHECK(!strcmp(release_of(""), "none"));
}

static enum vrt_torch_backend check(const struct vrt_torch_layout *row, char *why)
{
	void *allocator = *(void **)dlsym(handle, "_ZN3c104cuda20CUDACachingAllocator9allocatorE");
	return vrt_torch_layout_check(row, lib, allocator, why, 256);
}

static void test_the_right_row_passes(void)
{
	char why[256] = "";
	VT_CHECK(check(vrt_torch_layout_find("2.11.0"), why) == VRT_TORCH_NATIVE);
	VT_CHECK(why[0] == 0);
}

static void test_each_corrupted_row_is_refused_with_a_reason(void)
{
	const struct vrt_torch_layout *good = vrt_torch_layout_find("2.11.0");
	struct vrt_torch_layout bad[7];
	for (int i = 0; i < 7; i++)
		bad[i] = *good;
	bad[0].slot_initialized++;
	bad[1].slot_get_device_stats = 8;
	bad[2].slot_attach_tracker = 43;
	bad[3].vtable_slots = 52;
	bad[4].rtti_native = "N3c104cuda20CUDACachingAllocator6Native15OtherAllocatorE";
	bad[5].fn_get_device_stats = "_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator14getDeviceStatsEi";
	bad[6].slot_attach_tracker = 400; /* past the vtable: refused before it is read */
	bad[6].vtable_slots = 500;
	const char *reason[7] = { "slot 7 does not hold", "slot 8 does not hold", "slot 43 does not hold",
				  "50 slots where the table says 52", "not the caching allocator",
				  "slot 9 does not hold", "points outside" };
	for (int i = 0; i < 7; i++) {
		char why[256] = "";
		VT_CHECK(check(&bad[i], why) == VRT_TORCH_REFUSED);
		if (!strstr(why, reason[i]))
			vt_report(__FILE__, __LINE__, "row %d: \"%s\" does not say \"%s\"", i, why, reason[i]);
	}
}

static void test_a_release_without_the_tracker_is_refused(void)
{
	struct vrt_torch_layout row = *vrt_torch_layout_find("2.11.0");
	row.slot_attach_tracker = -1;
	row.release = "2.1.0";
	char why[256] = "";
	VT_CHECK(check(&row, why) == VRT_TORCH_REFUSED);
	VT_CHECK(strstr(why, "PyTorch 2.1.0 has no allocator trace tracker") != NULL);
}

static void test_the_async_backend_is_recognised(void)
{
	char why[256] = "";
	((void (*)(void))dlsym(handle, "fake_c10_use_async"))();
	VT_CHECK(check(vrt_torch_layout_find("2.11.0"), why) == VRT_TORCH_ASYNC);
	((void (*)(void))dlsym(handle, "fake_c10_use_native"))();
}

static void test_an_object_whose_vtable_is_elsewhere_is_refused(void)
{
	static const void *const elsewhere[4] = { 0 };
	void *object = ((void *(*)(const void *const *))dlsym(handle, "fake_c10_foreign_object"))(elsewhere + 2);
	char why[256] = "";
	VT_CHECK(vrt_torch_layout_check(vrt_torch_layout_find("2.11.0"), lib, object, why, sizeof(why)) ==
		 VRT_TORCH_REFUSED);
	VT_CHECK(strstr(why, "vtable is not in") != NULL);
	VT_CHECK(vrt_torch_layout_check(vrt_torch_layout_find("2.11.0"), "/nonexistent/libc10_cuda.so", object, why,
					sizeof(why)) == VRT_TORCH_REFUSED);
}

int main(int argc, char **argv)
{
	if (argc != 2 || !(handle = dlopen(lib = argv[1], RTLD_NOW))) {
		fprintf(stderr, "usage: test_torch_layout fake_c10_cuda.so (%s)\n", dlerror());
		return 2;
	}
	VT_RUN(test_rows_are_chosen_by_release_then_minor_series);
	VT_RUN(test_the_right_row_passes);
	VT_RUN(test_each_corrupted_row_is_refused_with_a_reason);
	VT_RUN(test_a_release_without_the_tracker_is_refused);
	VT_RUN(test_the_async_backend_is_recognised);
	VT_RUN(test_an_object_whose_vtable_is_elsewhere_is_refused);
	return vt_summary();
}
