/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Dropping a packet: always a DROP event and a count under the reason, then TC_ACT_SHOT. */
#ifndef __TENDRIL_LIB_DROP_H_
#define __TENDRIL_LIB_DROP_H_

#include "common.h"
#include "events.h"
#include "flow.h"
#include "metrics.h"
#include "trace.h"

/* A stage: every program drops on dozens of paths. */
__stage int drop_packet(struct __sk_buff *skb, const struct flow *f, int reason, __u8 direction, __u32 cookie)
{
	if (!f)
		return TC_ACT_SHOT;
	event_emit(skb, f, EVENT_DROP, (__u8)(-reason), direction, cookie);
	metrics_update(reason, direction, f->len);
	return TC_ACT_SHOT;
}

/* A forwarded packet: counted, and traced at level ALL. */
__stage int pass_packet(struct __sk_buff *skb, const struct flow *f, int action, __u8 point, __u8 direction)
{
	if (!f)
		return action;
	metrics_update(0, direction, f->len);
	trace_packet(skb, f, point, direction);
	return action;
}

#endif
