#include "queue.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io.h"

static int failed(struct buf *why, const char *what, const char *path)
{
	int e = errno;
	buf_printf(why, "%s %s: %s", what, path, strerror(e));
	return -1;
}

/* mkdir -p with mode 0700 for every directory it creates, as fs.mkdir({recursive}) does. */
static int make_dirs(char *dir, struct buf *why)
{
	for (char *p = dir + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char saved = *p;
		*p = '\0';
		int r = mkdir(dir, 0700);
		int e = errno;
		*p = saved;
		if (r < 0 && e != EEXIST) {
			errno = e;
			return failed(why, "cannot create", dir);
		}
		if (saved == '\0')
			break;
	}
	struct stat st;
	if (stat(dir, &st) < 0)
		return failed(why, "cannot stat", dir);
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return failed(why, "cannot use", dir);
	}
	return 0;
}

int deletion_queue_write(const char *socket_path, const char *body, size_t len, struct buf *path, struct buf *why)
{
	struct buf dir, tmp;
	buf_init(&dir, 8192);
	buf_init(&tmp, 8192);
	int rc = -1;
	int fd = -1;

	const char *slash = strrchr(socket_path, '/');
	if (!slash) {
		buf_printf(why, "socket path %s has no directory", socket_path);
		goto out;
	}
	/* dirname("/x") is "/": keep the leading slash, then add the queue's name. */
	size_t dir_len = (size_t)(slash - socket_path);
	if (buf_append(&dir, socket_path, dir_len) < 0 || buf_append_str(&dir, "/deletion-queue") < 0) {
		buf_printf(why, "socket path too long");
		goto out;
	}
	if (make_dirs(dir.data, why) < 0)
		goto out;

	struct timespec now;
	unsigned char rnd[4];
	if (clock_gettime(CLOCK_REALTIME, &now) < 0) {
		buf_printf(why, "clock_gettime: %s", strerror(errno));
		goto out;
	}
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		buf_printf(why, "getrandom: %s", strerror(errno));
		goto out;
	}
	long long ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
	char name[64];
	int nl = snprintf(name, sizeof(name), "%lld-%02x%02x%02x%02x.json", ms, rnd[0], rnd[1], rnd[2], rnd[3]);
	if (nl < 0 || (size_t)nl >= sizeof(name)) {
		buf_printf(why, "queue file name too long");
		goto out;
	}
	if (buf_printf(&tmp, "%s/.%s.tmp", dir.data, name) < 0 || buf_printf(path, "%s/%s", dir.data, name) < 0) {
		buf_printf(why, "queue path too long");
		goto out;
	}
	fd = open(tmp.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		failed(why, "cannot create", tmp.data);
		goto out;
	}
	if (write_all(fd, body, len) < 0) {
		failed(why, "cannot write", tmp.data);
		goto out_unlink;
	}
	int c = close(fd);
	fd = -1;
	if (c < 0) {
		failed(why, "cannot write", tmp.data);
		goto out_unlink;
	}
	if (rename(tmp.data, path->data) < 0) {
		failed(why, "cannot rename", tmp.data);
		goto out_unlink;
	}
	rc = 0;
	goto out;

out_unlink:
	if (fd >= 0)
		close(fd);
	fd = -1;
	unlink(tmp.data);
out:
	if (fd >= 0)
		close(fd);
	buf_free(&dir);
	buf_free(&tmp);
	return rc;
}
