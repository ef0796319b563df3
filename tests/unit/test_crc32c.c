/* SPDX-License-Identifier: MIT */
/* crc32c: known answers, and the SSE4.2 and portable paths agree on every length and alignment. */
#include <string.h>

#include "vramtrace/record.h"
#include "vt.h"

static void test_known_answers(void)
{
	uint8_t buf[64];
	VT_EQ(vrt_crc32c(0, "123456789", 9), 0xe3069283u);
	VT_EQ(vrt_crc32c(0, "", 0), 0);
	VT_EQ(vrt_crc32c(0, "a", 1), 0xc1d04330u);
	/* RFC 3720 (iSCSI), appendix B.4. */
	memset(buf, 0, 32);
	VT_EQ(vrt_crc32c(0, buf, 32), 0x8a9136aau);
	memset(buf, 0xff, 32);
	VT_EQ(vrt_crc32c(0, buf, 32), 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	VT_EQ(vrt_crc32c(0, buf, 32), 0x46dd794eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	VT_EQ(vrt_crc32c(0, buf, 32), 0x113fdb5cu);
	static const char fox[] = "The quick brown fox jumps over the lazy dog";
	VT_EQ(vrt_crc32c(0, fox, sizeof(fox) - 1), 0x22620404u);
}

static void test_software_path_known_answers(void)
{
	VT_EQ(~vrt_crc32c_sw(~0u, (const uint8_t *)"123456789", 9), 0xe3069283u);
}

static void test_paths_agree(void)
{
#if defined(__x86_64__)
	if (!__builtin_cpu_supports("sse4.2")) {
		printf("  (no SSE4.2 here: only the portable path is used)\n");
		return;
	}
	uint64_t rng = 42;
	static uint8_t buf[4096 + 16];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)vt_rand(&rng);
	for (size_t off = 0; off < 16; off++)
		for (size_t len = 0; len <= 300; len++) {
			uint32_t seed = (uint32_t)vt_rand(&rng);
			uint32_t hw = vrt_crc32c_hw(seed, buf + off, len), sw = vrt_crc32c_sw(seed, buf + off, len);
			VT_CHECKF(hw == sw, "off %zu len %zu: hw %08x sw %08x", off, len, hw, sw);
		}
	VT_EQ(vrt_crc32c_hw(~0u, buf, 4096), vrt_crc32c_sw(~0u, buf, 4096));
#else
	printf("  (not x86-64: only the portable path exists)\n");
#endif
}

static void test_incremental(void)
{
	uint64_t rng = 7;
	uint8_t buf[1000];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)vt_rand(&rng);
	uint32_t whole = vrt_crc32c(0, buf, sizeof(buf));
	for (size_t cut = 0; cut <= sizeof(buf); cut += 37) {
		uint32_t part = vrt_crc32c(vrt_crc32c(0, buf, cut), buf + cut, sizeof(buf) - cut);
		VT_CHECKF(part == whole, "split at %zu: %08x != %08x", cut, part, whole);
	}
}

int main(void)
{
	VT_RUN(test_known_answers);
	VT_RUN(test_software_path_known_answers);
	VT_RUN(test_paths_agree);
	VT_RUN(test_incremental);
	return vt_summary();
}
