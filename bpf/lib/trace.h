/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Trace events, gated by the agent's trace level (tendril_config). */
#ifndef __TENDRIL_LIB_TRACE_H_
#define __TENDRIL_LIB_TRACE_H_

#include "common.h"
#include "events.h"
#include "flow.h"

/* A trace for every packet, at trace level ALL only. */
static __always_inline void trace_packet(struct __sk_buff *skb, const struct flow *f, __u8 point, __u8 direction)
{
	if (f->trace_level >= TRACE_LEVEL_ALL)
		event_emit(skb, f, EVENT_TRACE, point, direction, 0);
}

/*
 * A trace for the first packet of a new flow from NEW_FLOWS on; at ALL the
 * per-packet trace already covers it, so it is not sent twice.
 */
static __always_inline void trace_new_flow(struct __sk_buff *skb, const struct flow *f, __u8 point, __u8 direction)
{
	if (f->trace_level == TRACE_LEVEL_NEW_FLOWS)
		event_emit(skb, f, EVENT_TRACE, point, direction, 0);
}

#endif
