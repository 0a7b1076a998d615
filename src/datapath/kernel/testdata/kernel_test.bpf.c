// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Test object for src/datapath/kernel/bpf: one sched_cls program in two
 * variants (to test atomic replacement through a pinned link) and one map of
 * each kind the datapath will use. The variant that ran is visible in
 * tdl_variant, so a test can tell which program a link holds.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Shared with kernel_test.ts in src/datapath/kernel/bpf (codecs there). */
struct tdl_counter {
	__u64 packets;
	__u64 bytes;
};

struct tdl_event {
	__u32 saddr; /* network order */
	__u32 daddr; /* network order */
	__u32 len;
	__u32 variant;
};

struct tdl_lpm_key {
	__u32 prefixlen;
	__u8 addr[4];
};

/* Verdict classes kept in tdl_lpm (destination prefix → class). */
#define TDL_CLASS_DENY 1

/* Packets and bytes per IPv4 source address; pinned, so it outlives a reload. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct tdl_counter);
	__uint(max_entries, 1024);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tdl_count SEC(".maps");

/* IPv4 packets seen per program variant (index 1 or 2). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 4);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tdl_variant SEC(".maps");

/* Destination prefix → verdict class. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct tdl_lpm_key);
	__type(value, __u32);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tdl_lpm SEC(".maps");

/* Last packet length per destination; not pinned (lives with the object). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 128);
} tdl_lru SEC(".maps");

/* Every packet the program saw, counted per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} tdl_percpu SEC(".maps");

/* One event per IPv4 packet. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} tdl_events SEC(".maps");

static __always_inline int tdl_handle(struct __sk_buff *skb, __u32 variant)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	__u32 zero = 0;
	__u64 *seen;

	seen = bpf_map_lookup_elem(&tdl_percpu, &zero);
	if (seen)
		*seen += 1;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return TC_ACT_OK;

	__u64 *per_variant = bpf_map_lookup_elem(&tdl_variant, &variant);
	if (per_variant)
		__sync_fetch_and_add(per_variant, 1);

	__u32 saddr = ip->saddr;
	struct tdl_counter *c = bpf_map_lookup_elem(&tdl_count, &saddr);
	if (c) {
		__sync_fetch_and_add(&c->packets, 1);
		__sync_fetch_and_add(&c->bytes, skb->len);
	} else {
		struct tdl_counter first = { .packets = 1, .bytes = skb->len };
		bpf_map_update_elem(&tdl_count, &saddr, &first, BPF_NOEXIST);
	}

	__u32 daddr = ip->daddr;
	__u32 len = skb->len;
	bpf_map_update_elem(&tdl_lru, &daddr, &len, BPF_ANY);

	struct tdl_event ev = { .saddr = saddr, .daddr = daddr, .len = len, .variant = variant };
	bpf_ringbuf_output(&tdl_events, &ev, sizeof(ev), 0);

	struct tdl_lpm_key lk = { .prefixlen = 32 };
	__builtin_memcpy(lk.addr, &daddr, sizeof(lk.addr));
	__u32 *class = bpf_map_lookup_elem(&tdl_lpm, &lk);
	if (class && *class == TDL_CLASS_DENY)
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

SEC("tc")
int tdl_count_v1(struct __sk_buff *skb)
{
	return tdl_handle(skb, 1);
}

SEC("tc")
int tdl_count_v2(struct __sk_buff *skb)
{
	return tdl_handle(skb, 2);
}

char _license[] SEC("license") = "Dual BSD/GPL";
