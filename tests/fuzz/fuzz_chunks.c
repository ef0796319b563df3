/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: chunk discovery and decoding (ring resynchronisation, padding, sequence
 * ordering, duplicates, the log walk, zstd frames, records) with the file header and the
 * checksums out of the way: the input is a recipe for a trace file (fuzz_recipe.h), which is
 * built and then read like fuzz_reader.
 */
#define _GNU_SOURCE
#include "fuzz_recipe.h"
#include "fuzz_trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64];
	if (!vrt_fuzz_build_recipe(data, size, path, sizeof(path)))
		(void)vrt_fuzz_read_trace(path);
	return 0;
}
