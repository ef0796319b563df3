/* SPDX-License-Identifier: MIT */
/*
 * Error codes shared by the reader, the writer and the control channel. Shared code returns 0 or
 * one of these (negative, stable numbers); only the analyzer's main turns them into messages and
 * exit codes (see vrt_exit_code in analyzer/cli.h).
 */
#ifndef VRAMTRACE_ERROR_H
#define VRAMTRACE_ERROR_H

#define VRT_ERRORS(X)                                                              \
	X(VRT_OK, 0, "success")                                                     \
	X(VRT_E_IO, -1, "input/output error")                                       \
	X(VRT_E_MAGIC, -2, "not a vramtrace trace (bad magic)")                     \
	X(VRT_E_VERSION, -3, "unsupported trace format version")                    \
	X(VRT_E_TRUNCATED, -4, "trace is truncated")                                \
	X(VRT_E_CORRUPT, -5, "trace is corrupt (a checksum or consistency check failed)")                 \
	X(VRT_E_DECOMPRESS, -6, "chunk does not decompress")                        \
	X(VRT_E_RECORD, -7, "malformed record")                                     \
	X(VRT_E_RANGE, -8, "reference to an undefined id")                          \
	X(VRT_E_NOMEM, -9, "out of memory")                                         \
	X(VRT_E_SIZE, -10, "size field out of range")                               \
	X(VRT_E_ARG, -11, "invalid argument")                                       \
	X(VRT_E_NOENT, -12, "no such file or process")                              \
	X(VRT_E_PERM, -13, "permission denied")                                     \
	X(VRT_E_PROTO, -14, "malformed control message")                            \
	X(VRT_E_UNSUPPORTED, -15, "not supported here")                             \
	X(VRT_E_EMPTY, -16, "trace holds no events")                               \
	X(VRT_E_CHANGED, -17, "the trace changed while it was read (another process overwrote or cut it)") \
	X(VRT_E_NOT_FILE, -18, "not a regular file")                                \
	X(VRT_E_PEER, -19, "the control socket is held by another process")         \
	X(VRT_E_TIMEOUT, -20, "timed out")

enum vrt_error {
#define VRT_ERROR_ENUM(name, value, text) name = value,
	VRT_ERRORS(VRT_ERROR_ENUM)
#undef VRT_ERROR_ENUM
};

static inline const char *vrt_strerror(int err)
{
	switch (err) {
#define VRT_ERROR_CASE(name, value, text) \
	case value:                       \
		return text;
		VRT_ERRORS(VRT_ERROR_CASE)
#undef VRT_ERROR_CASE
	default:
		return "unknown error";
	}
}

#endif /* VRAMTRACE_ERROR_H */
