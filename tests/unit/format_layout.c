/* SPDX-License-Identifier: MIT */
/*
 * Prints what include/vramtrace/format.h defines, one fact a line, for test_format_spec.py to
 * compare with the tables of docs/trace-format.md:
 *
 *   const  NAME VALUE            (VALUE decimal; VRT_FILE_MAGIC as hex bytes)
 *   struct NAME SIZE
 *   field  STRUCT FIELD OFFSET SIZE
 *   enum   ENUM MEMBER VALUE
 *   op     NAME VALUE LAYOUT
 *   api    NAME VALUE FUNCTION
 *
 * Enum members and struct fields are listed here by hand (C cannot enumerate them); the Python
 * test parses format.h's text as well and fails when a member is missing from this list.
 */
#include <stddef.h>
#include <stdio.h>

#include "vramtrace/format.h"
#include "vramtrace/record.h"

#define CONST(name) printf("const %s %llu\n", #name, (unsigned long long)(name))
#define STRUCT(s) printf("struct %s %zu\n", #s, sizeof(struct s))
#define FIELD(s, f) printf("field %s %s %zu %zu\n", #s, #f, offsetof(struct s, f), sizeof(((struct s *)0)->f))
#define MEMBER(e, m) printf("enum %s %s %lld\n", #e, #m, (long long)(m))

int main(void)
{
	printf("const VRT_FILE_MAGIC ");
	for (unsigned i = 0; i < VRT_FILE_MAGIC_LEN; i++)
		printf("%02x", (unsigned char)VRT_FILE_MAGIC[i]);
	printf("\n");
	CONST(VRT_FILE_MAGIC_LEN);
	CONST(VRT_FORMAT_MAJOR);
	CONST(VRT_FORMAT_MINOR);
	CONST(VRT_FILE_HEADER_SIZE);
	CONST(VRT_STATE_OFFSET);
	CONST(VRT_CHUNK_MAGIC);
	CONST(VRT_CHUNK_ALIGN);
	CONST(VRT_CHUNK_MAX_RAW);
	CONST(VRT_ID_SLACK);
	CONST(VRT_RECORD_MAX_FIXED);

	STRUCT(vrt_file_header);
	FIELD(vrt_file_header, magic);
	FIELD(vrt_file_header, version_major);
	FIELD(vrt_file_header, version_minor);
	FIELD(vrt_file_header, header_size);
	FIELD(vrt_file_header, flags);
	FIELD(vrt_file_header, ts_unit_ns);
	FIELD(vrt_file_header, ring_offset);
	FIELD(vrt_file_header, ring_size);
	FIELD(vrt_file_header, log_offset);
	FIELD(vrt_file_header, start_realtime_ns);
	FIELD(vrt_file_header, start_monotonic_ns);
	FIELD(vrt_file_header, pid);
	FIELD(vrt_file_header, ppid);
	FIELD(vrt_file_header, rank);
	FIELD(vrt_file_header, local_rank);
	FIELD(vrt_file_header, world_size);
	FIELD(vrt_file_header, header_crc);
	FIELD(vrt_file_header, hostname);
	FIELD(vrt_file_header, reserved);
	FIELD(vrt_file_header, state);
	FIELD(vrt_file_header, reserved_tail);

	STRUCT(vrt_file_state);
	FIELD(vrt_file_state, generation);
	FIELD(vrt_file_state, log_end);
	FIELD(vrt_file_state, ring_head);
	FIELD(vrt_file_state, ring_tail);
	FIELD(vrt_file_state, ring_laps);
	FIELD(vrt_file_state, last_chunk_seq);
	FIELD(vrt_file_state, events_written);
	FIELD(vrt_file_state, events_lost);
	FIELD(vrt_file_state, end_ts);
	FIELD(vrt_file_state, end_reason);
	FIELD(vrt_file_state, end_detail);
	FIELD(vrt_file_state, reserved);
	FIELD(vrt_file_state, pad);
	FIELD(vrt_file_state, crc);

	STRUCT(vrt_chunk_header);
	FIELD(vrt_chunk_header, magic);
	FIELD(vrt_chunk_header, type);
	FIELD(vrt_chunk_header, codec);
	FIELD(vrt_chunk_header, flags);
	FIELD(vrt_chunk_header, stored_size);
	FIELD(vrt_chunk_header, raw_size);
	FIELD(vrt_chunk_header, seq);
	FIELD(vrt_chunk_header, payload_crc);
	FIELD(vrt_chunk_header, header_crc);

	MEMBER(vrt_file_flags, VRT_FILE_RING);
	MEMBER(vrt_file_flags, VRT_FILE_ATTACHED);
	MEMBER(vrt_file_flags, VRT_FILE_ARMED);

	MEMBER(vrt_end_reason, VRT_END_RUNNING);
	MEMBER(vrt_end_reason, VRT_END_EXIT);
	MEMBER(vrt_end_reason, VRT_END_SIGNAL);
	MEMBER(vrt_end_reason, VRT_END_KILLED);
	MEMBER(vrt_end_reason, VRT_END_DISABLED);
	MEMBER(vrt_end_reason, VRT_END_EXEC);
	MEMBER(vrt_end_reason, VRT_END_DETACHED);
	MEMBER(vrt_end_reason, VRT_END_WRITE_FAILED);
	MEMBER(vrt_end_reason, VRT_END_REASON_LAST);

	MEMBER(vrt_chunk_type, VRT_CHUNK_EVENTS);
	MEMBER(vrt_chunk_type, VRT_CHUNK_TABLES);
	MEMBER(vrt_chunk_type, VRT_CHUNK_CHECKPOINT);
	MEMBER(vrt_chunk_type, VRT_CHUNK_PADDING);
	MEMBER(vrt_chunk_type, VRT_CHUNK_TYPE_LAST);

	MEMBER(vrt_codec, VRT_CODEC_NONE);
	MEMBER(vrt_codec, VRT_CODEC_ZSTD);

	MEMBER(vrt_field_code, VRT_FC_TS);
	MEMBER(vrt_field_code, VRT_FC_ADDR);
	MEMBER(vrt_field_code, VRT_FC_ADDR_ABS);
	MEMBER(vrt_field_code, VRT_FC_SIZE);
	MEMBER(vrt_field_code, VRT_FC_AUX);
	MEMBER(vrt_field_code, VRT_FC_AUX2);
	MEMBER(vrt_field_code, VRT_FC_API);
	MEMBER(vrt_field_code, VRT_FC_DEVICE);
	MEMBER(vrt_field_code, VRT_FC_KIND);
	MEMBER(vrt_field_code, VRT_FC_STREAM);
	MEMBER(vrt_field_code, VRT_FC_STACK);
	MEMBER(vrt_field_code, VRT_FC_STACK2);
	MEMBER(vrt_field_code, VRT_FC_RESULT);
	MEMBER(vrt_field_code, VRT_FC_ID);
	MEMBER(vrt_field_code, VRT_FC_ID2);
	MEMBER(vrt_field_code, VRT_FC_BYTES);

	MEMBER(vrt_op, VRT_OP_THREAD);
	MEMBER(vrt_op, VRT_OP_ALLOC);
	MEMBER(vrt_op, VRT_OP_FREE);
	MEMBER(vrt_op, VRT_OP_FAILED);
	MEMBER(vrt_op, VRT_OP_PHYS_CREATE);
	MEMBER(vrt_op, VRT_OP_PHYS_RELEASE);
	MEMBER(vrt_op, VRT_OP_MAP);
	MEMBER(vrt_op, VRT_OP_UNMAP);
	MEMBER(vrt_op, VRT_OP_VA_RESERVE);
	MEMBER(vrt_op, VRT_OP_VA_FREE);
	MEMBER(vrt_op, VRT_OP_IMPORT);
	MEMBER(vrt_op, VRT_OP_IMPORT_CLOSE);
	MEMBER(vrt_op, VRT_OP_BLOCK_ALLOC);
	MEMBER(vrt_op, VRT_OP_BLOCK_FREE);
	MEMBER(vrt_op, VRT_OP_OOM);
	MEMBER(vrt_op, VRT_OP_MARK);
	MEMBER(vrt_op, VRT_OP_PHASE_ENTER);
	MEMBER(vrt_op, VRT_OP_PHASE_EXIT);
	MEMBER(vrt_op, VRT_OP_LOST);
	MEMBER(vrt_op, VRT_OP_MODE);
	MEMBER(vrt_op, VRT_OP_SEED);
	MEMBER(vrt_op, VRT_OP_CONTEXT);
	MEMBER(vrt_op, VRT_OP_BLOCK_SIZE);
	MEMBER(vrt_op, VRT_OP_WALK);
	MEMBER(vrt_op, VRT_OP_OWNER);
	MEMBER(vrt_op, VRT_OP_OOM_LIMITS);
	MEMBER(vrt_op, VRT_OP_EXITING);
	MEMBER(vrt_op, VRT_OP_CAPTURE_BEGIN);
	MEMBER(vrt_op, VRT_OP_CAPTURE_END);
	MEMBER(vrt_op, VRT_OP_STRING);
	MEMBER(vrt_op, VRT_OP_MODULE);
	MEMBER(vrt_op, VRT_OP_SYMBOL);
	MEMBER(vrt_op, VRT_OP_PYCODE);
	MEMBER(vrt_op, VRT_OP_PYFRAME);
	MEMBER(vrt_op, VRT_OP_STACK);
	MEMBER(vrt_op, VRT_OP_THREAD_INFO);
	MEMBER(vrt_op, VRT_OP_INFO);
	MEMBER(vrt_op, VRT_OP_CP_BEGIN);
	MEMBER(vrt_op, VRT_OP_CP_LIVE);
	MEMBER(vrt_op, VRT_OP_CP_PHASE);
	MEMBER(vrt_op, VRT_OP_CP_END);
	MEMBER(vrt_op, VRT_OP_LAST);

	MEMBER(vrt_mem_kind, VRT_KIND_DEVICE);
	MEMBER(vrt_mem_kind, VRT_KIND_HOST_PINNED);
	MEMBER(vrt_mem_kind, VRT_KIND_MANAGED);
	MEMBER(vrt_mem_kind, VRT_KIND_ARRAY);
	MEMBER(vrt_mem_kind, VRT_KIND_LAST);

	MEMBER(vrt_frame_kind, VRT_FRAME_NATIVE);
	MEMBER(vrt_frame_kind, VRT_FRAME_PYTHON);
	MEMBER(vrt_frame_kind, VRT_FRAME_LABEL);
	MEMBER(vrt_frame_kind, VRT_FRAME_EVAL);

	MEMBER(vrt_mode, VRT_MODE_OFF);
	MEMBER(vrt_mode, VRT_MODE_ARMED);
	MEMBER(vrt_mode, VRT_MODE_FULL);

	MEMBER(vrt_mode_cause, VRT_CAUSE_START);
	MEMBER(vrt_mode_cause, VRT_CAUSE_CONTROL);
	MEMBER(vrt_mode_cause, VRT_CAUSE_ATTACH);
	MEMBER(vrt_mode_cause, VRT_CAUSE_ERROR);

	MEMBER(vrt_cp_reason, VRT_CP_PERIODIC);
	MEMBER(vrt_cp_reason, VRT_CP_OOM);
	MEMBER(vrt_cp_reason, VRT_CP_SNAPSHOT);
	MEMBER(vrt_cp_reason, VRT_CP_EXIT);
	MEMBER(vrt_cp_reason, VRT_CP_ATTACH);

	MEMBER(vrt_exiting, VRT_EXITING_PYTHON);

	MEMBER(vrt_walk_reason, VRT_WALK_PHASE);
	MEMBER(vrt_walk_reason, VRT_WALK_OOM);
	MEMBER(vrt_walk_reason, VRT_WALK_SNAPSHOT);
	MEMBER(vrt_walk_reason, VRT_WALK_EXIT);
	MEMBER(vrt_walk_reason, VRT_WALK_REQUEST);

	MEMBER(vrt_walk_status, VRT_WALK_COMPLETE);
	MEMBER(vrt_walk_status, VRT_WALK_TIMED_OUT);
	MEMBER(vrt_walk_status, VRT_WALK_FAILED);

	MEMBER(vrt_owner_category, VRT_OWNER_OTHER);
	MEMBER(vrt_owner_category, VRT_OWNER_PARAMETER);
	MEMBER(vrt_owner_category, VRT_OWNER_GRADIENT);
	MEMBER(vrt_owner_category, VRT_OWNER_OPTIMIZER_STATE);
	MEMBER(vrt_owner_category, VRT_OWNER_ACTIVATION);

	MEMBER(vrt_owner_status, VRT_OWNER_FOUND);
	MEMBER(vrt_owner_status, VRT_OWNER_UNREACHABLE);

	/* vrt_api: complete by construction (the X macro), plus the limit. */
	MEMBER(vrt_api, VRT_API_LAST);

#define OP(o, layout) printf("op %s %d %s\n", #o, (int)(o), layout);
	VRT_RECORD_LAYOUTS(OP)
#undef OP
#define API(id, value, name) printf("api VRT_API_%s %d %s\n", #id, (int)(value), name);
	VRT_APIS(API)
#undef API
	return ferror(stdout) ? 1 : 0;
}
