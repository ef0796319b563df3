/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the whole trace reader. The input is a trace file: it goes into a memfd,
 * vrt_trace_open scans and checks it and loads the tables, and a full replay runs every record
 * through the model, walking each record's stack to the root. Built with
 * -fsanitize=fuzzer,address,undefined (tests/fuzz/meson.build, scripts/fuzz-smoke.sh), or with
 * replay_main.c as a plain program that runs a corpus.
 */
#include "fuzz_trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64];
	if (!vrt_fuzz_file(data, size, path, sizeof(path)) && vrt_fuzz_affordable(path))
		(void)vrt_fuzz_read_trace(path);
	return 0;
}
