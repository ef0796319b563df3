/* SPDX-License-Identifier: MIT */
/*
 * vramtrace trace format: the one definition shared by the preload (writer) and the analyzer (reader).
 *
 * The written specification is docs/trace-format.md; tests/unit/test_format_spec.py checks that every
 * struct offset, size, enum value and record layout below matches the tables there. Change both
 * together and bump VRT_FORMAT_MINOR (compatible addition) or VRT_FORMAT_MAJOR (anything else).
 *
 * A trace file is: a 4096-byte file header (with a state block the writer rewrites in place),
 * optionally a fixed-size ring region, then an append-only log. Both regions hold chunks; each
 * chunk is a 32-byte header followed by one independent zstd frame of records. All integers in
 * headers are little-endian; records use LEB128 varints.
 */
#ifndef VRAMTRACE_FORMAT_H
#define VRAMTRACE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define VRT_FILE_MAGIC "VRAMTRC\0"
#define VRT_FILE_MAGIC_LEN 8
#define VRT_FORMAT_MAJOR 1
#define VRT_FORMAT_MINOR 4
#define VRT_FILE_HEADER_SIZE 4096u
#define VRT_STATE_OFFSET 512u
#define VRT_CHUNK_MAGIC 0x4b484356u /* "VCHK" */
#define VRT_CHUNK_ALIGN 8u
/* A reader refuses chunks larger than this: no writer produces them, so they mean corruption. */
#define VRT_CHUNK_MAX_RAW (64u << 20)
/* Definition ids are dense (docs/trace-format.md, Tables): an id may exceed the number of
 * definitions of its table read so far by at most this (threads and modules never described). */
#define VRT_ID_SLACK 65536u

/* ---- file header ------------------------------------------------------------------------- */

enum vrt_file_flags {
	VRT_FILE_RING = 1u << 0,     /* events live in the ring region; tables in the log */
	VRT_FILE_ATTACHED = 1u << 1, /* tracing began after process start (attach) */
	VRT_FILE_ARMED = 1u << 2,    /* the process started in armed mode */
};

enum vrt_end_reason {
	VRT_END_RUNNING = 0,  /* never closed: process still running, or killed (SIGKILL, OOM killer) */
	VRT_END_EXIT = 1,     /* normal exit; end_detail = exit status if known, else -1 */
	VRT_END_SIGNAL = 2,   /* fatal signal caught; end_detail = signal number */
	VRT_END_KILLED = 3,   /* set afterwards by `vramtrace run`: killed by signal end_detail */
	VRT_END_DISABLED = 4, /* the preload disabled itself after an internal error */
	VRT_END_EXEC = 5,     /* the process called exec; the new image writes its own trace */
	VRT_END_DETACHED = 6, /* tracing stopped by `vramtrace attach --stop` */
	VRT_END_WRITE_FAILED = 7, /* writing the trace failed; end_detail = errno, or a vrt_error (< 0) */
	VRT_END_REASON_LAST   /* not part of the ABI */
};

/* Rewritten in place (one pwrite) after every chunk; generation and crc detect torn copies. */
struct vrt_file_state {
	uint64_t generation;     /* incremented on each rewrite */
	uint64_t log_end;        /* absolute file offset where the log's complete chunks end */
	uint64_t ring_head;      /* ring-relative offset where the next ring chunk goes */
	uint64_t ring_tail;      /* ring-relative offset of the oldest complete chunk */
	uint64_t ring_laps;      /* times the ring wrapped */
	uint64_t last_chunk_seq; /* highest chunk sequence number written */
	uint64_t events_written; /* event records written so far */
	uint64_t events_lost;    /* events dropped (buffer overflow, I/O error) */
	uint64_t end_ts;         /* trace time of the end, ts units */
	uint32_t end_reason;     /* enum vrt_end_reason */
	int32_t end_detail;      /* exit status or signal number */
	uint8_t reserved[40];
	uint32_t pad;
	uint32_t crc;            /* crc32c of the bytes before this field */
};

struct vrt_file_header {
	char magic[8];               /* VRT_FILE_MAGIC */
	uint16_t version_major;      /* VRT_FORMAT_MAJOR */
	uint16_t version_minor;      /* VRT_FORMAT_MINOR */
	uint32_t header_size;        /* VRT_FILE_HEADER_SIZE */
	uint32_t flags;              /* enum vrt_file_flags */
	uint32_t ts_unit_ns;         /* one timestamp unit in nanoseconds */
	uint64_t ring_offset;        /* absolute offset of the ring region, 0 if none */
	uint64_t ring_size;          /* bytes in the ring region, 0 if none */
	uint64_t log_offset;         /* absolute offset where the log begins */
	uint64_t start_realtime_ns;  /* CLOCK_REALTIME at ts 0 */
	uint64_t start_monotonic_ns; /* CLOCK_MONOTONIC at ts 0 */
	int32_t pid;
	int32_t ppid;
	int32_t rank;                /* RANK, or -1 */
	int32_t local_rank;          /* LOCAL_RANK, or -1 */
	int32_t world_size;          /* WORLD_SIZE, or -1 */
	uint32_t header_crc;         /* crc32c of bytes 0..83 */
	char hostname[64];
	uint8_t reserved[VRT_STATE_OFFSET - 152];
	struct vrt_file_state state; /* at VRT_STATE_OFFSET */
	uint8_t reserved_tail[VRT_FILE_HEADER_SIZE - VRT_STATE_OFFSET - 128];
};

/* ---- chunks ------------------------------------------------------------------------------ */

enum vrt_chunk_type {
	VRT_CHUNK_EVENTS = 1,     /* event records */
	VRT_CHUNK_TABLES = 2,     /* definitions: strings, modules, symbols, stacks, threads... */
	VRT_CHUNK_CHECKPOINT = 3, /* the complete live state at one instant, or a part of it */
	VRT_CHUNK_PADDING = 4,    /* ring filler before a wrap; payload is ignored */
	VRT_CHUNK_TYPE_LAST       /* not part of the ABI */
};

enum vrt_codec {
	VRT_CODEC_NONE = 0,
	VRT_CODEC_ZSTD = 1, /* one zstd frame with content checksum */
};

struct vrt_chunk_header {
	uint32_t magic;       /* VRT_CHUNK_MAGIC */
	uint8_t type;         /* enum vrt_chunk_type */
	uint8_t codec;        /* enum vrt_codec */
	uint16_t flags;       /* reserved, 0 */
	uint32_t stored_size; /* payload bytes after this header (the next chunk starts 8-aligned) */
	uint32_t raw_size;    /* payload bytes after decoding, <= VRT_CHUNK_MAX_RAW */
	uint64_t seq;         /* 1, 2, 3... across log and ring; order of writing */
	uint32_t payload_crc; /* crc32c of the stored payload */
	uint32_t header_crc;  /* crc32c of bytes 0..27 */
};

/* ---- records ----------------------------------------------------------------------------- */

/*
 * A record is one opcode byte followed by the fields that vrt_record_layouts[op] lists, in
 * order, each coded as below. Delta state (ts, addr) starts at 0 at the beginning of every
 * chunk, so chunks decode independently.
 */
enum vrt_field_code {
	VRT_FC_TS = 't',     /* svarint: ts minus previous ts in this chunk (ts units) */
	VRT_FC_ADDR = 'a',   /* svarint: addr minus previous addr in this chunk */
	VRT_FC_ADDR_ABS = 'A', /* uvarint: addr itself (definitions carry no deltas) */
	VRT_FC_SIZE = 's',   /* uvarint: bytes */
	VRT_FC_AUX = 'x',    /* uvarint: op-specific */
	VRT_FC_AUX2 = 'y',   /* uvarint: op-specific */
	VRT_FC_API = 'p',    /* uvarint: enum vrt_api */
	VRT_FC_DEVICE = 'd', /* svarint: device ordinal, -1 for host */
	VRT_FC_KIND = 'k',   /* uvarint: enum vrt_mem_kind */
	VRT_FC_STREAM = 'q', /* uvarint: stream or pool handle, 0 if none */
	VRT_FC_STACK = 'S',  /* uvarint: stack id of this operation, 0 if none */
	VRT_FC_STACK2 = 'T', /* uvarint: stack id of the allocation this operation ends */
	VRT_FC_RESULT = 'r', /* svarint: CUresult / cudaError_t returned */
	VRT_FC_ID = 'i',     /* uvarint: id (meaning per op) */
	VRT_FC_ID2 = 'j',    /* uvarint: second id (meaning per op) */
	VRT_FC_BYTES = 'B',  /* uvarint length, then that many bytes */
};

enum vrt_op {
	/* events (VRT_CHUNK_EVENTS) */
	VRT_OP_THREAD = 1,       /* i: thread index for the records that follow */
	VRT_OP_ALLOC = 2,        /* memory became live: addr, size; aux = requested/pitch detail */
	VRT_OP_FREE = 3,         /* memory released; size and T (allocating stack) from the live set */
	VRT_OP_FAILED = 4,       /* an allocation request failed with result r */
	VRT_OP_PHYS_CREATE = 5,  /* cuMemCreate: addr = handle */
	VRT_OP_PHYS_RELEASE = 6, /* cuMemRelease: addr = handle */
	VRT_OP_MAP = 7,          /* cuMemMap: addr = va, aux = handle, aux2 = offset in handle */
	VRT_OP_UNMAP = 8,        /* cuMemUnmap: addr = va */
	VRT_OP_VA_RESERVE = 9,   /* cuMemAddressReserve: addr, size; aux = alignment */
	VRT_OP_VA_FREE = 10,     /* cuMemAddressFree */
	VRT_OP_IMPORT = 11,      /* IPC or shareable-handle import: someone else's memory mapped */
	VRT_OP_IMPORT_CLOSE = 12,
	VRT_OP_BLOCK_ALLOC = 13, /* caching-allocator block handed to a tensor; aux = requested size */
	VRT_OP_BLOCK_FREE = 14,  /* tensor block returned to the cache */
	VRT_OP_OOM = 15,         /* out of memory: size requested, aux = free, aux2 = total bytes */
	VRT_OP_MARK = 16,        /* i: label string id */
	VRT_OP_PHASE_ENTER = 17, /* i: phase name string id */
	VRT_OP_PHASE_EXIT = 18,  /* i: phase name string id */
	VRT_OP_LOST = 19,        /* i: number of events this thread dropped here */
	VRT_OP_MODE = 20,        /* i: enum vrt_mode now in effect; j: enum vrt_mode_cause */
	VRT_OP_SEED = 21,        /* live before tracing began (attach/armed): like ALLOC */
	VRT_OP_CONTEXT = 22,     /* context created (i=1) or destroyed/reset (i=0) on device d */
	VRT_OP_BLOCK_SIZE = 23,  /* the block at addr turned out to be s bytes (BLOCK_ALLOC had an estimate) */
	VRT_OP_WALK = 24,        /* a retention walk ended: the OWNER records before it are its findings */
	VRT_OP_OWNER = 25,       /* a Python object owns the buffer at addr: what it is, what holds it */
	VRT_OP_OOM_LIMITS = 26,  /* the limits PyTorch reported with its out-of-memory error */
	VRT_OP_EXITING = 27,     /* teardown begins: what is freed after it, the ending freed */
	VRT_OP_CAPTURE_BEGIN = 28, /* a stream began capturing a CUDA graph (this thread's allocations follow) */
	VRT_OP_CAPTURE_END = 29, /* that stream's capture ended */
	/* definitions (VRT_CHUNK_TABLES) */
	VRT_OP_STRING = 32,      /* i: id, B: UTF-8 bytes */
	VRT_OP_MODULE = 33,      /* i: id, j: path string id, A: load base, s: span, B: build-id */
	VRT_OP_SYMBOL = 34,      /* A: code address, i: module id, j: name string id, x: offset */
	VRT_OP_PYCODE = 35,      /* i: id, j: filename string id, x: qualname string id, y: first line */
	VRT_OP_PYFRAME = 36,     /* i: id, j: code id, x: instruction offset, y: line */
	VRT_OP_STACK = 37,       /* i: id, j: parent id (0 = root), y: frame kind, x: frame value */
	VRT_OP_THREAD_INFO = 38, /* i: thread index, x: OS thread id, j: name string id */
	VRT_OP_INFO = 39,        /* i: key string id, j: value string id */
	/* checkpoints (VRT_CHUNK_CHECKPOINT) */
	VRT_OP_CP_BEGIN = 48,    /* t: ts, i: enum vrt_cp_reason, x: events before it, y: lost */
	VRT_OP_CP_LIVE = 49,     /* one live item: j: original op, t: its ts, and the ALLOC fields */
	VRT_OP_CP_PHASE = 50,    /* i: phase name id, x: invocations entered, y: depth open now */
	VRT_OP_CP_END = 51,      /* i: number of CP_LIVE records */
	VRT_OP_LAST              /* not part of the ABI */
};

/* Field layout of each op, as a string of enum vrt_field_code characters. */
#define VRT_RECORD_LAYOUTS(X)                                  \
	X(VRT_OP_THREAD, "i")                                   \
	X(VRT_OP_ALLOC, "tpdkasxqS")                            \
	X(VRT_OP_FREE, "tpdkasqST")                             \
	X(VRT_OP_FAILED, "tpdksrqS")                            \
	X(VRT_OP_PHYS_CREATE, "tpdkasS")                        \
	X(VRT_OP_PHYS_RELEASE, "tpdasST")                       \
	X(VRT_OP_MAP, "tpdasxyS")                               \
	X(VRT_OP_UNMAP, "tpdasS")                               \
	X(VRT_OP_VA_RESERVE, "tpdasxS")                         \
	X(VRT_OP_VA_FREE, "tpdasST")                            \
	X(VRT_OP_IMPORT, "tpdkasxS")                            \
	X(VRT_OP_IMPORT_CLOSE, "tpdasST")                       \
	X(VRT_OP_BLOCK_ALLOC, "tpdasxqS")                       \
	X(VRT_OP_BLOCK_FREE, "tpdasqST")                        \
	X(VRT_OP_OOM, "tpdksxyrS")                              \
	X(VRT_OP_MARK, "ti")                                    \
	X(VRT_OP_PHASE_ENTER, "tiS")                            \
	X(VRT_OP_PHASE_EXIT, "ti")                              \
	X(VRT_OP_LOST, "ti")                                    \
	X(VRT_OP_MODE, "tij")                                   \
	X(VRT_OP_SEED, "tpdkasxqS")                             \
	X(VRT_OP_CONTEXT, "tdi")                                \
	X(VRT_OP_BLOCK_SIZE, "tpdas")                           \
	X(VRT_OP_WALK, "tijxys")                                \
	X(VRT_OP_OWNER, "tdasijx")                              \
	X(VRT_OP_OOM_LIMITS, "tdsxyijr")                        \
	X(VRT_OP_EXITING, "ti")                                 \
	X(VRT_OP_CAPTURE_BEGIN, "tpdqS")                        \
	X(VRT_OP_CAPTURE_END, "tpdqr")                          \
	X(VRT_OP_STRING, "iB")                                  \
	X(VRT_OP_MODULE, "ijAsB")                               \
	X(VRT_OP_SYMBOL, "Aijx")                                \
	X(VRT_OP_PYCODE, "ijxy")                                \
	X(VRT_OP_PYFRAME, "ijxy")                               \
	X(VRT_OP_STACK, "ijyx")                                 \
	X(VRT_OP_THREAD_INFO, "ixj")                            \
	X(VRT_OP_INFO, "ij")                                    \
	X(VRT_OP_CP_BEGIN, "tixy")                              \
	X(VRT_OP_CP_LIVE, "jtpdkasxyqS")                        \
	X(VRT_OP_CP_PHASE, "ixy")                               \
	X(VRT_OP_CP_END, "i")

/* Kinds of memory; the analyzer reports each separately. */
enum vrt_mem_kind {
	VRT_KIND_DEVICE = 0,      /* device memory (cudaMalloc, cuMemAlloc, VMM physical on device) */
	VRT_KIND_HOST_PINNED = 1, /* page-locked host memory (cudaHostAlloc, cudaHostRegister...) */
	VRT_KIND_MANAGED = 2,     /* unified memory */
	VRT_KIND_ARRAY = 3,       /* CUDA arrays */
	VRT_KIND_LAST             /* not part of the ABI */
};

/* Stack node frame kinds (VRT_OP_STACK field y). */
enum vrt_frame_kind {
	VRT_FRAME_NATIVE = 0, /* x: return address (call site + 1), symbolized by VRT_OP_SYMBOL */
	VRT_FRAME_PYTHON = 1, /* x: pyframe id */
	VRT_FRAME_LABEL = 2,  /* x: string id, a synthetic frame such as "[before attach]" */
	VRT_FRAME_EVAL = 3,   /* end of the Python frames run by one interpreter eval call */
};

enum vrt_mode {
	VRT_MODE_OFF = 0,   /* nothing recorded */
	VRT_MODE_ARMED = 1, /* live set kept, no stacks, no events written */
	VRT_MODE_FULL = 2,  /* everything recorded */
};

enum vrt_mode_cause {
	VRT_CAUSE_START = 0,   /* configuration at start */
	VRT_CAUSE_CONTROL = 1, /* vramtrace attach / attach --stop */
	VRT_CAUSE_ATTACH = 2,  /* library injected into a running process */
	VRT_CAUSE_ERROR = 3,   /* internal error: the preload disabled itself */
};

enum vrt_cp_reason {
	VRT_CP_PERIODIC = 0, /* start of a ring segment, or every N events */
	VRT_CP_OOM = 1,      /* an allocation failed for lack of memory */
	VRT_CP_SNAPSHOT = 2, /* requested through the control channel or the API */
	VRT_CP_EXIT = 3,     /* the process is ending */
	VRT_CP_ATTACH = 4,   /* state seeded when full tracing began */
};

/* Which teardown began (VRT_OP_EXITING field i). */
enum vrt_exiting {
	VRT_EXITING_PYTHON = 1, /* the Python interpreter began to finalize (before its atexit handlers) */
};

/* Why a retention walk ran (VRT_OP_WALK field i). */
enum vrt_walk_reason {
	VRT_WALK_PHASE = 1,    /* a phase's next call began while earlier calls' memory was live */
	VRT_WALK_OOM = 2,      /* PyTorch's allocator ran out of memory */
	VRT_WALK_SNAPSHOT = 3, /* a snapshot or an attach asked for it */
	VRT_WALK_EXIT = 4,     /* the interpreter is about to finalize */
	VRT_WALK_REQUEST = 5,  /* the program asked for it (Python API) */
};

/* How a retention walk ended (VRT_OP_WALK field j). */
enum vrt_walk_status {
	VRT_WALK_COMPLETE = 0,  /* every live buffer asked about was looked for */
	VRT_WALK_TIMED_OUT = 1, /* its time or object budget ran out first */
	VRT_WALK_FAILED = 2,    /* it stopped on an error (the program's objects misbehaved) */
};

/* What the Python object that owns a buffer is (VRT_OP_OWNER field j). */
enum vrt_owner_category {
	VRT_OWNER_OTHER = 0,           /* none of the below: reports fall back to the stack's rule */
	VRT_OWNER_PARAMETER = 1,       /* the storage of an nn.Parameter */
	VRT_OWNER_GRADIENT = 2,        /* a .grad, or a gradient buffer an optimizer or engine owns */
	VRT_OWNER_OPTIMIZER_STATE = 3, /* optimizer.state values, master weights, other optimizer buffers */
	VRT_OWNER_ACTIVATION = 4,      /* a tensor with an autograd history (grad_fn) */
};

/* Whether the owner was found reachable (VRT_OP_OWNER field x). */
enum vrt_owner_status {
	VRT_OWNER_FOUND = 1,       /* reachable from a root: the chain says how */
	VRT_OWNER_UNREACHABLE = 2, /* reachable from no root: held by a cycle, or by native code */
};

/* Every API the preload intercepts. Values are stable; names are what `dump` prints. */
#define VRT_APIS(X)                                   \
	X(UNKNOWN, 0, "unknown")                      \
	X(CUDA_MALLOC, 1, "cudaMalloc")               \
	X(CUDA_FREE, 2, "cudaFree")                   \
	X(CUDA_MALLOC_PITCH, 3, "cudaMallocPitch")    \
	X(CUDA_MALLOC_3D, 4, "cudaMalloc3D")          \
	X(CUDA_MALLOC_MANAGED, 5, "cudaMallocManaged") \
	X(CUDA_MALLOC_ASYNC, 6, "cudaMallocAsync")    \
	X(CUDA_MALLOC_FROM_POOL_ASYNC, 7, "cudaMallocFromPoolAsync") \
	X(CUDA_FREE_ASYNC, 8, "cudaFreeAsync")        \
	X(CUDA_MALLOC_HOST, 9, "cudaMallocHost")      \
	X(CUDA_HOST_ALLOC, 10, "cudaHostAlloc")       \
	X(CUDA_FREE_HOST, 11, "cudaFreeHost")         \
	X(CUDA_HOST_REGISTER, 12, "cudaHostRegister") \
	X(CUDA_HOST_UNREGISTER, 13, "cudaHostUnregister") \
	X(CUDA_IPC_OPEN, 14, "cudaIpcOpenMemHandle")  \
	X(CUDA_IPC_CLOSE, 15, "cudaIpcCloseMemHandle") \
	X(CUDA_STREAM_BEGIN_CAPTURE, 16, "cudaStreamBeginCapture") \
	X(CUDA_STREAM_BEGIN_CAPTURE_TO_GRAPH, 17, "cudaStreamBeginCaptureToGraph") \
	X(CUDA_STREAM_END_CAPTURE, 18, "cudaStreamEndCapture") \
	X(CU_MEM_ALLOC, 32, "cuMemAlloc_v2")          \
	X(CU_MEM_ALLOC_PITCH, 33, "cuMemAllocPitch_v2") \
	X(CU_MEM_FREE, 34, "cuMemFree_v2")            \
	X(CU_MEM_ALLOC_MANAGED, 35, "cuMemAllocManaged") \
	X(CU_MEM_ALLOC_ASYNC, 36, "cuMemAllocAsync")  \
	X(CU_MEM_ALLOC_ASYNC_PTSZ, 37, "cuMemAllocAsync_ptsz") \
	X(CU_MEM_ALLOC_FROM_POOL_ASYNC, 38, "cuMemAllocFromPoolAsync") \
	X(CU_MEM_ALLOC_FROM_POOL_ASYNC_PTSZ, 39, "cuMemAllocFromPoolAsync_ptsz") \
	X(CU_MEM_FREE_ASYNC, 40, "cuMemFreeAsync")    \
	X(CU_MEM_FREE_ASYNC_PTSZ, 41, "cuMemFreeAsync_ptsz") \
	X(CU_MEM_ALLOC_HOST, 42, "cuMemAllocHost_v2") \
	X(CU_MEM_HOST_ALLOC, 43, "cuMemHostAlloc")    \
	X(CU_MEM_FREE_HOST, 44, "cuMemFreeHost")      \
	X(CU_MEM_HOST_REGISTER, 45, "cuMemHostRegister_v2") \
	X(CU_MEM_HOST_UNREGISTER, 46, "cuMemHostUnregister") \
	X(CU_MEM_CREATE, 47, "cuMemCreate")           \
	X(CU_MEM_RELEASE, 48, "cuMemRelease")         \
	X(CU_MEM_MAP, 49, "cuMemMap")                 \
	X(CU_MEM_UNMAP, 50, "cuMemUnmap")             \
	X(CU_MEM_ADDRESS_RESERVE, 51, "cuMemAddressReserve") \
	X(CU_MEM_ADDRESS_FREE, 52, "cuMemAddressFree") \
	X(CU_MEM_IMPORT_SHAREABLE, 53, "cuMemImportFromShareableHandle") \
	X(CU_IPC_OPEN, 54, "cuIpcOpenMemHandle_v2")   \
	X(CU_IPC_CLOSE, 55, "cuIpcCloseMemHandle")    \
	X(CU_MEM_POOL_TRIM, 56, "cuMemPoolTrimTo")    \
	X(CU_CTX_DESTROY, 57, "cuCtxDestroy_v2")      \
	X(CU_PRIMARY_CTX_RESET, 58, "cuDevicePrimaryCtxReset_v2") \
	X(CU_ARRAY_CREATE, 59, "cuArrayCreate_v2")    \
	X(CU_ARRAY_3D_CREATE, 60, "cuArray3DCreate_v2") \
	X(CU_ARRAY_DESTROY, 61, "cuArrayDestroy")     \
	X(CU_MEM_RETAIN_HANDLE, 62, "cuMemRetainAllocationHandle") \
	X(CU_PRIMARY_CTX_RELEASE, 63, "cuDevicePrimaryCtxRelease_v2") \
	X(CU_STREAM_BEGIN_CAPTURE, 64, "cuStreamBeginCapture_v2") \
	X(CU_STREAM_BEGIN_CAPTURE_TO_GRAPH, 65, "cuStreamBeginCaptureToGraph") \
	X(CU_STREAM_END_CAPTURE, 66, "cuStreamEndCapture") \
	X(TORCH_BLOCK, 96, "torch.CUDACachingAllocator") \
	X(TORCH_OOM, 97, "torch.OutOfMemory")         \
	X(USER_API, 98, "vramtrace API")              \
	X(NVTX, 99, "NVTX")                           \
	X(TORCH_SNAPSHOT, 100, "torch.memory_snapshot")

enum vrt_api {
#define VRT_API_ENUM(id, value, name) VRT_API_##id = value,
	VRT_APIS(VRT_API_ENUM)
#undef VRT_API_ENUM
	VRT_API_LAST = 128 /* not part of the ABI */
};

/* ---- layout checks ----------------------------------------------------------------------- */

_Static_assert(sizeof(struct vrt_file_state) == 128, "vrt_file_state is 128 bytes");
_Static_assert(sizeof(struct vrt_file_header) == VRT_FILE_HEADER_SIZE, "file header is 4096 bytes");
_Static_assert(offsetof(struct vrt_file_header, header_crc) == 84, "header_crc at 84");
_Static_assert(offsetof(struct vrt_file_header, hostname) == 88, "hostname at 88");
_Static_assert(offsetof(struct vrt_file_header, state) == VRT_STATE_OFFSET, "state block at 512");
_Static_assert(offsetof(struct vrt_file_state, crc) == 124, "state crc at 124");
_Static_assert(sizeof(struct vrt_chunk_header) == 32, "chunk header is 32 bytes");
_Static_assert(offsetof(struct vrt_chunk_header, header_crc) == 28, "chunk header_crc at 28");
_Static_assert(VRT_OP_LAST <= 64, "opcodes fit the layout table");

#endif /* VRAMTRACE_FORMAT_H */
