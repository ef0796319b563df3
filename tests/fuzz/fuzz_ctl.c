/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the control-channel parser (include/vramtrace/control.h). Whatever it
 * accepts must be well formed (length within bounds, NUL-terminated, no NUL inside, a known
 * type) and must survive vrt_ctl_format -> vrt_ctl_parse unchanged.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vramtrace/control.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vrt_ctl_msg msg;
	if (vrt_ctl_parse(data, size, &msg))
		return 0;
	if (msg.length > VRT_CTL_MAX_PAYLOAD || msg.payload[msg.length] || strlen(msg.payload) != msg.length ||
	    !vrt_ctl_type_known(msg.type))
		abort();
	if ((msg.type == VRT_CTL_SNAPSHOT && msg.payload[0] != '/') ||
	    (msg.type == VRT_CTL_MARK && msg.length == 0))
		abort();
	uint8_t buf[sizeof(struct vrt_ctl_header) + VRT_CTL_MAX_PAYLOAD];
	long n = vrt_ctl_format(buf, msg.type, msg.status, msg.payload);
	if (n != (long)size || memcmp(buf, data, size))
		abort(); /* parse and format are inverses on valid messages */
	struct vrt_ctl_msg again;
	if (vrt_ctl_parse(buf, (size_t)n, &again) || again.type != msg.type || again.status != msg.status ||
	    again.length != msg.length || memcmp(again.payload, msg.payload, msg.length + 1))
		abort();
	return 0;
}
