/* SPDX-License-Identifier: MIT */
/*
 * A trace file built from a fuzz input that is a recipe for one, so that the fuzzer spends its
 * time on chunk layouts and records instead of guessing crc32c values (fuzz_chunks, and
 * fuzz_reports for inputs that are not trace files):
 *
 *   byte 0        bit 0: ring layout; bits 1-3: ring size = 512 << n
 *   then chunks:  type (byte, 0..255: 0 and > 4 are invalid), flags (byte), seq delta (i16),
 *                 ring offset / 8 (u16), record bytes length (u16), the record bytes
 *   flags:        bits 0-1 payload: 0 zstd-compress the records, 1 stored as is (codec NONE),
 *                 2 the bytes themselves as the "zstd" payload, 3 zstd with raw_size off by one
 *                 bit 2: place in the ring at the given offset (ring layout), else append to the log
 *                 bit 3: spoil the payload crc; bit 4: spoil the header crc; bit 5: unknown codec
 *
 * The file is built with correct checksums unless told otherwise.
 */
#ifndef VRT_FUZZ_RECIPE_H
#define VRT_FUZZ_RECIPE_H

#include "fuzz_common.h" /* first: it defines _GNU_SOURCE */

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "vramtrace/format.h"
#include "vramtrace/record.h"

#define VRT_FUZZ_MAX_FILE (4u << 20)

struct vrt_fuzz_builder {
	uint8_t *file;
	size_t size, log_end;
};

static inline void vrt_fuzz_put(struct vrt_fuzz_builder *b, size_t off, const void *p, size_t n)
{
	if (off + n > VRT_FUZZ_MAX_FILE)
		return;
	memcpy(b->file + off, p, n);
	if (off + n > b->size)
		b->size = off + n;
}

/* Builds the file a recipe describes into the fuzz memfd; its path into path. 0 or -1. */
static inline int vrt_fuzz_build_recipe(const uint8_t *data, size_t size, char *path, size_t path_len)
{
	if (size < 1)
		return -1;
	static uint8_t *file, *zbuf;
	static size_t zcap;
	if (!file && !(file = malloc(VRT_FUZZ_MAX_FILE)))
		return -1;
	struct vrt_fuzz_builder b = { file, VRT_FILE_HEADER_SIZE, 0 };
	memset(file, 0, VRT_FILE_HEADER_SIZE);
	bool ring = data[0] & 1;
	uint64_t ring_size = ring ? 512u << ((data[0] >> 1) & 7) : 0;

	struct vrt_file_header h;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, VRT_FILE_MAGIC, VRT_FILE_MAGIC_LEN);
	h.version_major = VRT_FORMAT_MAJOR;
	h.version_minor = VRT_FORMAT_MINOR;
	h.header_size = VRT_FILE_HEADER_SIZE;
	h.flags = ring ? VRT_FILE_RING : 0;
	h.ts_unit_ns = 1000;
	h.ring_offset = ring ? VRT_FILE_HEADER_SIZE : 0;
	h.ring_size = ring_size;
	h.log_offset = VRT_FILE_HEADER_SIZE + ring_size;
	h.rank = h.local_rank = h.world_size = -1;
	h.header_crc = vrt_crc32c(0, &h, offsetof(struct vrt_file_header, header_crc));
	memcpy(file, &h, sizeof(h));
	if (ring) { /* the ring region exists in full, zero-filled */
		memset(file + VRT_FILE_HEADER_SIZE, 0, ring_size);
		b.size = h.log_offset;
	}
	b.log_end = h.log_offset;

	uint64_t seq = 0;
	const uint8_t *p = data + 1, *end = data + size;
	while (end - p >= 8) {
		uint8_t type = p[0], flags = p[1];
		int16_t dseq;
		uint16_t slot, len;
		memcpy(&dseq, p + 2, 2);
		memcpy(&slot, p + 4, 2);
		memcpy(&len, p + 6, 2);
		p += 8;
		if (len > end - p)
			len = (uint16_t)(end - p);
		const uint8_t *records = p;
		p += len;
		seq += (uint64_t)(int64_t)dseq;

		const uint8_t *payload = records;
		size_t stored = len, raw = len;
		uint8_t codec = VRT_CODEC_NONE;
		switch (flags & 3) {
		case 0:
		case 3: {
			size_t bound = ZSTD_compressBound(len);
			if (bound > zcap) {
				free(zbuf);
				zbuf = malloc(bound);
				zcap = zbuf ? bound : 0;
				if (!zbuf)
					return -1;
			}
			size_t n = ZSTD_compress(zbuf, zcap, records, len, 1);
			if (ZSTD_isError(n))
				continue;
			payload = zbuf;
			stored = n;
			codec = VRT_CODEC_ZSTD;
			if ((flags & 3) == 3)
				raw = len + 1;
			break;
		}
		case 1:
			break;
		case 2:
			codec = VRT_CODEC_ZSTD;
			break;
		}
		struct vrt_chunk_header ch = { VRT_CHUNK_MAGIC, type, (uint8_t)(flags & 32 ? 7 : codec), 0,
					       (uint32_t)stored, (uint32_t)raw, seq, 0, 0 };
		ch.payload_crc = vrt_crc32c(0, payload, stored) ^ (flags & 8 ? 1u : 0u);
		ch.header_crc = vrt_crc32c(0, &ch, offsetof(struct vrt_chunk_header, header_crc)) ^ (flags & 16 ? 1u : 0u);
		size_t off;
		if (ring && (flags & 4)) {
			off = VRT_FILE_HEADER_SIZE + ((size_t)slot * 8) % ring_size;
			if (off + sizeof(ch) > h.log_offset)
				continue;
			/* The ring region ends where it ends: a chunk that does not fit is cut off, as a
			 * writer never makes it but damage might. */
			size_t room = h.log_offset - off - sizeof(ch);
			vrt_fuzz_put(&b, off, &ch, sizeof(ch));
			vrt_fuzz_put(&b, off + sizeof(ch), payload, stored < room ? stored : room);
			if (b.size < h.log_offset)
				b.size = h.log_offset;
		} else {
			off = b.log_end;
			vrt_fuzz_put(&b, off, &ch, sizeof(ch));
			vrt_fuzz_put(&b, off + sizeof(ch), payload, stored);
			b.log_end = (off + sizeof(ch) + stored + 7) & ~(size_t)7;
		}
		if (b.size >= VRT_FUZZ_MAX_FILE)
			break;
	}
	return vrt_fuzz_file(file, b.size, path, path_len);
}

#endif /* VRT_FUZZ_RECIPE_H */
