/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What every tendril program includes: kernel UAPI types, libbpf's helpers
 * and the constants generated from src/datapath/bpf/constants.ts.
 */
#ifndef __TENDRIL_LIB_COMMON_H_
#define __TENDRIL_LIB_COMMON_H_

#include <linux/bpf.h>
#include <linux/errno.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "tendril_constants.h"
#include "identity.h"

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/*
 * A stage of a program that the verifier checks once, on its own: a global
 * (non-static, never inlined) BPF-to-BPF function. Inlined, a function is
 * verified again on every path that reaches it, with every state the caller
 * carries; as a stage it is checked once with unknown arguments, and its
 * callers see only its return value, so each program's processed
 * instructions stay well under the verifier's budget on every compiler
 * (verifierBudget.test.ts holds them to half of it). The verifier takes a
 * stage's pointer arguments as memory of their type's size that may be NULL:
 * a stage checks each before use. Only the context (skb), scalars and such
 * pointers pass; it returns a scalar, never a pointer.
 */
#define __stage __attribute__((noinline))

#ifndef offsetof
#define offsetof(type, member) __builtin_offsetof(type, member)
#endif

/* One load or store the compiler neither splits, merges nor repeats: a map value other CPUs write too. */
#define READ_ONCE(x) (*(volatile __typeof__(x) *)&(x))
#define WRITE_ONCE(x, v) (*(volatile __typeof__(x) *)&(x) = (v))

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* A 16-byte address slot: IPv4 in ip[0] (network order), IPv6 in all four. */
union addr_slot {
	__u32 ip[4];
	__u8 b[16];
};

#endif
