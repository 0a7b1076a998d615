/*
 * crr: a native TCP connect/request/response load generator and its server,
 * for the benchmarks and end-to-end tests that measure a datapath's cost per
 * connection. A Node.js client spends ~300 µs of its own CPU per connection,
 * which hides a datapath that costs a few µs; this one spends a few µs.
 *
 *   crr client [-t THREADS] [-d SECONDS] [-T TIMEOUT_MS] [-p PAUSE_US] [--fin] -a DEST [-a DEST]... [-f FILE]
 *     Each thread, until the duration is over: socket, connect, write 1 byte,
 *     read 1 byte, close, over the destinations in turn; -p pauses that long
 *     after each connection (a steady trickle instead of as many as it can). The close is an RST
 *     (SO_LINGER 0: no TIME_WAIT on either side) unless --fin. Prints one JSON
 *     line: connections, errors by step and errno name, conn/s, latency
 *     percentiles (µs, from socket() to the answer read), connections per
 *     second of the run, and the process's CPU time.
 *   crr server [-t THREADS] -l DEST [-l DEST]...
 *     THREADS epoll loops, each with its own SO_REUSEPORT listeners on every
 *     DEST, echo whatever a connection sends; prints "ready" once listening,
 *     runs until SIGTERM/SIGINT.
 *
 * DEST is ADDR:PORT, where ADDR may be a range FIRST-LAST of IPv4 addresses
 * and PORT a range LO-HI: every (address, port) of the product is one
 * destination (at most MAX_DESTS); an IPv6 address is written [ADDR]:PORT
 * (one address, the port may be a range). FILE holds one DEST a line ('#'
 * comments).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_DESTS 65536
#define MAX_THREADS 64
#define MAX_SECONDS 3600
#define MAX_LISTENERS 1024
#define MAX_ERRNO 160
/* Latency histogram: exact below 64 µs, then 32 buckets per power of two (~3% wide), up to 2^32 µs. */
#define HIST_SUB_BITS 5
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_LINEAR 64u
#define HIST_BUCKETS (HIST_LINEAR + (32u - 6u) * HIST_SUB)

enum step { STEP_SOCKET, STEP_CONNECT, STEP_WRITE, STEP_READ, STEP_COUNT };
static const char *const STEP_NAMES[STEP_COUNT] = {"socket", "connect", "write", "read"};
/* Pseudo-errnos past the kernel's (< 134): a step's timeout, a peer that closed before answering, anything else. */
#define ERR_TIMEOUT (MAX_ERRNO - 2)
#define ERR_EOF (MAX_ERRNO - 1)
#define ERR_OTHER (MAX_ERRNO - 3)

/* A destination or listen address of either family. */
union dest_addr {
	struct sockaddr sa;
	struct sockaddr_in v4;
	struct sockaddr_in6 v6;
};

static socklen_t dest_len(const union dest_addr *d) {
	return d->sa.sa_family == AF_INET6 ? sizeof d->v6 : sizeof d->v4;
}

struct dests {
	union dest_addr *addrs;
	size_t len;
};

struct client_thread {
	pthread_t tid;
	unsigned index;
	uint64_t connections;
	uint64_t errors[STEP_COUNT][MAX_ERRNO];
	uint64_t hist[HIST_BUCKETS];
	uint64_t per_second[MAX_SECONDS + 1];
};

struct client_opts {
	unsigned threads;
	unsigned seconds;
	unsigned timeout_ms;
	unsigned pause_us;
	int fin;
	struct dests dests;
	struct timespec start;
	struct timespec end;
};

static void die(const char *what) {
	fprintf(stderr, "crr: %s\n", what);
	exit(2);
}

static void die_errno(const char *what) {
	fprintf(stderr, "crr: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void usage(void) {
	fprintf(stderr,
		"usage: crr client [-t THREADS] [-d SECONDS] [-T TIMEOUT_MS] [-p PAUSE_US] [--fin] -a ADDR:PORT... [-f FILE]\n"
		"       crr server [-t THREADS] -l ADDR:PORT...\n"
		"ADDR may be FIRST-LAST (IPv4 range) or [IPv6], PORT may be LO-HI.\n");
	exit(2);
}

static int64_t ns_between(const struct timespec *a, const struct timespec *b) {
	return (int64_t)(b->tv_sec - a->tv_sec) * 1000000000 + (b->tv_nsec - a->tv_nsec);
}

/* A decimal in [min, max], the whole string; anything else is fatal. */
static unsigned long parse_num(const char *s, unsigned long min, unsigned long max, const char *what) {
	char *end = NULL;
	if (*s < '0' || *s > '9') goto bad;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max) goto bad;
	return v;
bad:
	fprintf(stderr, "crr: bad %s \"%s\" (%lu..%lu)\n", what, s, min, max);
	exit(2);
}

static union dest_addr *dests_next(struct dests *d) {
	if (d->len >= MAX_DESTS) die("too many destinations (at most 65536)");
	if (d->addrs == NULL) {
		d->addrs = calloc(MAX_DESTS, sizeof *d->addrs);
		if (d->addrs == NULL) die("out of memory");
	}
	return &d->addrs[d->len++];
}

static void dests_push(struct dests *d, uint32_t addr_host, uint16_t port) {
	struct sockaddr_in *sa = &dests_next(d)->v4;
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(addr_host);
	sa->sin_port = htons(port);
}

static void dests_push6(struct dests *d, const struct in6_addr *addr, uint16_t port) {
	struct sockaddr_in6 *sa = &dests_next(d)->v6;
	sa->sin6_family = AF_INET6;
	sa->sin6_addr = *addr;
	sa->sin6_port = htons(port);
}

static uint32_t parse_ipv4(const char *s) {
	struct in_addr a;
	if (inet_pton(AF_INET, s, &a) != 1) {
		fprintf(stderr, "crr: bad IPv4 address \"%s\"\n", s);
		exit(2);
	}
	return ntohl(a.s_addr);
}

/* [IPV6]:PORT[-PORT] into `d` (buf is the spec's copy, starting at '['), every port. */
static void parse_dest6(struct dests *d, char *buf) {
	char *close = strchr(buf, ']');
	if (close == NULL || close[1] != ':') die("an IPv6 destination is [ADDR]:PORT");
	*close = '\0';
	struct in6_addr a;
	if (inet_pton(AF_INET6, buf + 1, &a) != 1) {
		fprintf(stderr, "crr: bad IPv6 address \"%s\"\n", buf + 1);
		exit(2);
	}
	char *ports = close + 2;
	char *port_dash = strchr(ports, '-');
	if (port_dash) *port_dash = '\0';
	unsigned long p0 = parse_num(ports, 0, 65535, "port");
	unsigned long p1 = port_dash ? parse_num(port_dash + 1, 0, 65535, "port") : p0;
	if (p1 < p0) die("a range must go upwards");
	if (p1 - p0 + 1 > MAX_DESTS) die("too many destinations (at most 65536)");
	for (unsigned long p = p0; p <= p1; p++) dests_push6(d, &a, (uint16_t)p);
}

/* ADDR[-ADDR]:PORT[-PORT] or [IPV6]:PORT[-PORT] into `d`, every address with every port. */
static void parse_dest(struct dests *d, const char *spec) {
	char buf[96];
	if (strlen(spec) >= sizeof buf) die("destination too long");
	strcpy(buf, spec);
	if (buf[0] == '[') {
		parse_dest6(d, buf);
		return;
	}
	char *colon = strrchr(buf, ':');
	if (colon == NULL) usage();
	*colon = '\0';
	char *ports = colon + 1;
	char *addr_dash = strchr(buf, '-');
	char *port_dash = strchr(ports, '-');
	if (addr_dash) *addr_dash = '\0';
	if (port_dash) *port_dash = '\0';
	uint32_t a0 = parse_ipv4(buf);
	uint32_t a1 = addr_dash ? parse_ipv4(addr_dash + 1) : a0;
	unsigned long p0 = parse_num(ports, 0, 65535, "port");
	unsigned long p1 = port_dash ? parse_num(port_dash + 1, 0, 65535, "port") : p0;
	if (a1 < a0 || p1 < p0) die("a range must go upwards");
	if ((uint64_t)(a1 - a0 + 1) * (p1 - p0 + 1) > MAX_DESTS) die("too many destinations (at most 65536)");
	for (uint64_t a = a0; a <= a1; a++)
		for (unsigned long p = p0; p <= p1; p++) dests_push(d, (uint32_t)a, (uint16_t)p);
}

static void parse_dest_file(struct dests *d, const char *path) {
	FILE *f = fopen(path, "r");
	if (f == NULL) die_errno(path);
	char line[128];
	while (fgets(line, sizeof line, f) != NULL) {
		size_t n = strcspn(line, "#\r\n \t");
		if (line[n] == '\0' && n == sizeof line - 1) die("line too long in destination file");
		line[n] = '\0';
		if (n > 0) parse_dest(d, line);
	}
	if (ferror(f)) die_errno(path);
	fclose(f);
}

/* More descriptors than the default 1024: the server holds every open connection. */
static void raise_nofile(void) {
	struct rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &r);
	}
}

/* ---- client ---------------------------------------------------------- */

static unsigned hist_index(uint64_t us) {
	if (us < HIST_LINEAR) return (unsigned)us;
	if (us >= (1ull << 32)) return HIST_BUCKETS - 1;
	unsigned e = 63u - (unsigned)__builtin_clzll(us); /* 6..31 */
	unsigned sub = (unsigned)(us >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1);
	return HIST_LINEAR + (e - 6u) * HIST_SUB + sub;
}

/* The middle of a bucket, in µs. */
static double hist_value(unsigned i) {
	if (i < HIST_LINEAR) return i;
	unsigned e = (i - HIST_LINEAR) / HIST_SUB + 6u;
	unsigned sub = (i - HIST_LINEAR) % HIST_SUB;
	double width = (double)(1ull << (e - HIST_SUB_BITS));
	return (double)(1ull << e) + sub * width + width / 2;
}

static void count_error(struct client_thread *t, enum step s, int err) {
	if (err <= 0 || err >= MAX_ERRNO || (err >= ERR_OTHER && err != ERR_TIMEOUT && err != ERR_EOF)) err = ERR_OTHER; /* errnos past the table share one slot */
	t->errors[s][err]++;
}

static void set_timeouts(int fd, unsigned ms) {
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* One connection; 0 when it answered, else the failed step's error was counted. */
static int one_connection(struct client_thread *t, const struct client_opts *o, const union dest_addr *dst) {
	int fd = socket(dst->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		count_error(t, STEP_SOCKET, errno);
		return -1;
	}
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (!o->fin) {
		struct linger lg = {.l_onoff = 1, .l_linger = 0};
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	}
	set_timeouts(fd, o->timeout_ms);
	int rc = -1;
	if (connect(fd, &dst->sa, dest_len(dst)) != 0) {
		/* A blocking connect past SO_SNDTIMEO fails with EINPROGRESS: that is a timeout. */
		count_error(t, STEP_CONNECT, errno == EINPROGRESS ? ERR_TIMEOUT : errno);
		goto out;
	}
	char c = 'x';
	ssize_t n = send(fd, &c, 1, MSG_NOSIGNAL);
	if (n != 1) {
		count_error(t, STEP_WRITE, n < 0 ? (errno == EAGAIN ? ERR_TIMEOUT : errno) : ERR_EOF);
		goto out;
	}
	n = recv(fd, &c, 1, 0);
	if (n != 1) {
		count_error(t, STEP_READ, n < 0 ? (errno == EAGAIN ? ERR_TIMEOUT : errno) : ERR_EOF);
		goto out;
	}
	rc = 0;
out:
	close(fd);
	return rc;
}

struct client_ctx {
	struct client_thread *thread;
	const struct client_opts *opts;
};

static void *client_loop(void *arg) {
	struct client_ctx *ctx = arg;
	struct client_thread *t = ctx->thread;
	const struct client_opts *o = ctx->opts;
	size_t next = (size_t)t->index % o->dests.len;
	for (;;) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		if (ns_between(&o->end, &a) >= 0) break;
		int rc = one_connection(t, o, &o->dests.addrs[next]);
		clock_gettime(CLOCK_MONOTONIC, &b);
		if (++next == o->dests.len) next = 0;
		if (o->pause_us > 0) {
			struct timespec p = {.tv_sec = o->pause_us / 1000000, .tv_nsec = (long)(o->pause_us % 1000000) * 1000};
			(void)nanosleep(&p, NULL);
		}
		if (rc != 0) continue;
		t->connections++;
		int64_t ns = ns_between(&a, &b);
		t->hist[hist_index(ns > 0 ? (uint64_t)ns / 1000 : 0)]++;
		int64_t sec = ns_between(&o->start, &b) / 1000000000;
		t->per_second[sec < 0 ? 0 : sec > MAX_SECONDS ? MAX_SECONDS : sec]++;
	}
	return NULL;
}

static double percentile(const uint64_t *hist, uint64_t total, double q) {
	if (total == 0) return 0;
	uint64_t rank = (uint64_t)(q * (double)total);
	if (rank >= total) rank = total - 1;
	uint64_t seen = 0;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += hist[i];
		if (seen > rank) return hist_value(i);
	}
	return hist_value(HIST_BUCKETS - 1);
}

static const char *errno_name(int err) {
	if (err == ERR_TIMEOUT) return "timeout";
	if (err == ERR_EOF) return "eof";
	if (err == ERR_OTHER) return "other";
	const char *n = strerrorname_np(err);
	return n ? n : "other";
}

static double tv_us(struct timeval tv) {
	return (double)tv.tv_sec * 1e6 + (double)tv.tv_usec;
}

static int run_client(int argc, char **argv) {
	struct client_opts o = {.threads = 2, .seconds = 10, .timeout_ms = 5000, .fin = 0};
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--fin") == 0) {
			o.fin = 1;
			continue;
		}
		if (v == NULL) usage();
		if (strcmp(a, "-t") == 0) o.threads = (unsigned)parse_num(v, 1, MAX_THREADS, "thread count");
		else if (strcmp(a, "-d") == 0) o.seconds = (unsigned)parse_num(v, 1, MAX_SECONDS, "duration");
		else if (strcmp(a, "-T") == 0) o.timeout_ms = (unsigned)parse_num(v, 1, 600000, "timeout");
		else if (strcmp(a, "-p") == 0) o.pause_us = (unsigned)parse_num(v, 0, 10000000, "pause");
		else if (strcmp(a, "-a") == 0) parse_dest(&o.dests, v);
		else if (strcmp(a, "-f") == 0) parse_dest_file(&o.dests, v);
		else usage();
		i++;
	}
	if (o.dests.len == 0) usage();
	raise_nofile();
	struct client_thread *threads = calloc(o.threads, sizeof *threads);
	struct client_ctx *ctxs = calloc(o.threads, sizeof *ctxs);
	if (threads == NULL || ctxs == NULL) die("out of memory");
	clock_gettime(CLOCK_MONOTONIC, &o.start);
	o.end = o.start;
	o.end.tv_sec += o.seconds;
	for (unsigned i = 0; i < o.threads; i++) {
		threads[i].index = i;
		ctxs[i] = (struct client_ctx){.thread = &threads[i], .opts = &o};
		int err = pthread_create(&threads[i].tid, NULL, client_loop, &ctxs[i]);
		if (err != 0) {
			errno = err;
			die_errno("pthread_create");
		}
	}
	for (unsigned i = 0; i < o.threads; i++) pthread_join(threads[i].tid, NULL);
	struct timespec done;
	clock_gettime(CLOCK_MONOTONIC, &done);
	double seconds = (double)ns_between(&o.start, &done) / 1e9;

	static uint64_t hist[HIST_BUCKETS];
	static uint64_t errors[STEP_COUNT][MAX_ERRNO];
	static uint64_t per_second[MAX_SECONDS + 1];
	uint64_t connections = 0, error_total = 0;
	for (unsigned i = 0; i < o.threads; i++) {
		const struct client_thread *t = &threads[i];
		connections += t->connections;
		for (unsigned b = 0; b < HIST_BUCKETS; b++) hist[b] += t->hist[b];
		for (unsigned s = 0; s < STEP_COUNT; s++)
			for (unsigned e = 0; e < MAX_ERRNO; e++) errors[s][e] += t->errors[s][e], error_total += t->errors[s][e];
		for (unsigned s = 0; s <= MAX_SECONDS; s++) per_second[s] += t->per_second[s];
	}
	double max_us = 0;
	for (unsigned b = HIST_BUCKETS; b-- > 0;)
		if (hist[b] != 0) {
			max_us = hist_value(b);
			break;
		}
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0) die_errno("getrusage");

	printf("{\"connections\":%llu,\"errorCount\":%llu,\"errors\":{", (unsigned long long)connections, (unsigned long long)error_total);
	const char *sep = "";
	for (unsigned s = 0; s < STEP_COUNT; s++)
		for (unsigned e = 0; e < MAX_ERRNO; e++)
			if (errors[s][e] != 0) {
				printf("%s\"%s:%s\":%llu", sep, STEP_NAMES[s], errno_name((int)e), (unsigned long long)errors[s][e]);
				sep = ",";
			}
	printf("},\"seconds\":%.3f,\"connPerS\":%.1f,\"latencyUs\":{\"p50\":%.0f,\"p99\":%.0f,\"p999\":%.0f,\"max\":%.0f},", seconds,
	       seconds > 0 ? (double)connections / seconds : 0.0, percentile(hist, connections, 0.5), percentile(hist, connections, 0.99),
	       percentile(hist, connections, 0.999), max_us);
	printf("\"cpuUs\":{\"user\":%.0f,\"system\":%.0f},\"threads\":%u,\"destinations\":%zu,\"close\":\"%s\",\"perSecond\":[", tv_us(ru.ru_utime), tv_us(ru.ru_stime),
	       o.threads, o.dests.len, o.fin ? "fin" : "rst");
	unsigned last = o.seconds < MAX_SECONDS ? o.seconds : MAX_SECONDS;
	for (unsigned s = 0; s <= last; s++) printf("%s%llu", s ? "," : "", (unsigned long long)per_second[s]);
	printf("]}\n");
	if (fflush(stdout) != 0) die_errno("stdout");
	free(threads);
	free(ctxs);
	free(o.dests.addrs);
	return 0;
}

/* ---- server ---------------------------------------------------------- */

/* epoll data: a listener's index with this bit set, else a connection's fd. */
#define LISTENER_BIT (1ull << 63)

struct server_thread {
	pthread_t tid;
	int epfd;
	int listeners[MAX_LISTENERS];
	size_t nlisteners;
};

static int listen_on(const union dest_addr *sa) {
	int fd = socket(sa->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) die_errno("socket");
	int one = 1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
		die_errno("setsockopt");
	if (sa->sa.sa_family == AF_INET6) {
		/* [::]:PORT is IPv6's own: an IPv4 listener on the port may be there too. */
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	}
	if (bind(fd, &sa->sa, dest_len(sa)) != 0) {
		char ip[INET6_ADDRSTRLEN];
		int v6 = sa->sa.sa_family == AF_INET6;
		inet_ntop(sa->sa.sa_family, v6 ? (const void *)&sa->v6.sin6_addr : (const void *)&sa->v4.sin_addr, ip, sizeof ip);
		fprintf(stderr, "crr: bind %s%s%s:%u: %s\n", v6 ? "[" : "", ip, v6 ? "]" : "", ntohs(v6 ? sa->v6.sin6_port : sa->v4.sin_port), strerror(errno));
		exit(2);
	}
	if (listen(fd, 4096) != 0) die_errno("listen");
	return fd;
}

static void epoll_add(int epfd, int fd, uint64_t data) {
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = data};
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) die_errno("epoll_ctl");
}

static void serve_connection(int fd) {
	char buf[256];
	ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
	if (n <= 0 || send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n) close(fd); /* closing removes it from epoll */
}

static void *server_loop(void *arg) {
	struct server_thread *t = arg;
	struct epoll_event evs[256];
	for (;;) {
		int n = epoll_wait(t->epfd, evs, 256, -1);
		if (n < 0) {
			if (errno == EINTR) continue;
			die_errno("epoll_wait");
		}
		for (int i = 0; i < n; i++) {
			uint64_t d = evs[i].data.u64;
			if ((d & LISTENER_BIT) == 0) {
				serve_connection((int)d);
				continue;
			}
			size_t li = (size_t)(d & ~LISTENER_BIT);
			if (li >= t->nlisteners) continue;
			for (;;) {
				int c = accept4(t->listeners[li], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
				if (c < 0) break; /* EAGAIN: drained; ECONNABORTED, EMFILE: the next event tries again */
				int one = 1;
				(void)setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
				struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)c};
				if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, c, &ev) != 0) close(c);
			}
		}
	}
	return NULL;
}

static int run_server(int argc, char **argv) {
	unsigned nthreads = 2;
	struct dests listen_addrs = {0};
	for (int i = 2; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (v == NULL) usage();
		if (strcmp(argv[i], "-t") == 0) nthreads = (unsigned)parse_num(v, 1, MAX_THREADS, "thread count");
		else if (strcmp(argv[i], "-l") == 0) parse_dest(&listen_addrs, v);
		else usage();
		i++;
	}
	if (listen_addrs.len == 0) usage();
	if (listen_addrs.len > MAX_LISTENERS) die("too many listen addresses (at most 1024)");
	raise_nofile();
	/* Accepted sockets must not die with SIGPIPE when a client resets them mid-answer. */
	signal(SIGPIPE, SIG_IGN);
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	if (pthread_sigmask(SIG_BLOCK, &stop, NULL) != 0) die("pthread_sigmask");
	struct server_thread *threads = calloc(nthreads, sizeof *threads);
	if (threads == NULL) die("out of memory");
	for (unsigned i = 0; i < nthreads; i++) {
		struct server_thread *t = &threads[i];
		t->epfd = epoll_create1(EPOLL_CLOEXEC);
		if (t->epfd < 0) die_errno("epoll_create1");
		for (size_t l = 0; l < listen_addrs.len; l++) {
			t->listeners[l] = listen_on(&listen_addrs.addrs[l]);
			epoll_add(t->epfd, t->listeners[l], LISTENER_BIT | l);
		}
		t->nlisteners = listen_addrs.len;
	}
	for (unsigned i = 0; i < nthreads; i++) {
		int err = pthread_create(&threads[i].tid, NULL, server_loop, &threads[i]);
		if (err != 0) {
			errno = err;
			die_errno("pthread_create");
		}
	}
	printf("ready\n");
	if (fflush(stdout) != 0) die_errno("stdout");
	int sig = 0;
	sigwait(&stop, &sig);
	/* The worker threads block in epoll_wait forever: the process ends them. */
	exit(0);
}

int main(int argc, char **argv) {
	if (argc < 2) usage();
	if (strcmp(argv[1], "client") == 0) return run_client(argc, argv);
	if (strcmp(argv[1], "server") == 0) return run_server(argc, argv);
	usage();
	return 2;
}
