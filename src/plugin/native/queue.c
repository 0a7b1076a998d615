#define _GNU_SOURCE /* renameat2 */
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

#define QUEUE_NAME "deletion-queue"

static int failed(struct buf *why, const char *what, const char *path)
{
	int e = errno;
	buf_printf(why, "%s %s: %s", what, path, strerror(e));
	return -1;
}

/*
 * Opens the socket's directory: it must exist (the agent made it; a missing
 * one is a socket no agent serves, and making it would only park requests no
 * one drains) and only root may write into it.
 */
static int open_socket_dir(const char *dir, struct buf *why)
{
	/* The path is the operator's configuration: symlinks along it are theirs, so they are followed here. */
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			buf_printf(why, "the socket's directory %s does not exist or is not a directory: no agent can serve there (check the netconf's socket)",
				   dir);
		else
			failed(why, "cannot open", dir);
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		failed(why, "cannot stat", dir);
		close(fd);
		return -1;
	}
	if (st.st_uid != 0) {
		buf_printf(why, "the socket's directory %s is owned by uid %u, not root: a deletion queued there is not trusted", dir,
			   (unsigned)st.st_uid);
		close(fd);
		return -1;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		buf_printf(why, "the socket's directory %s is writable by its group or others (mode %04o): a deletion queued there is not trusted",
			   dir, (unsigned)(st.st_mode & 07777));
		close(fd);
		return -1;
	}
	return fd;
}

/* Opens (making it when missing) the queue in the socket's directory: a directory, not a symlink, root's, mode 0700. */
static int open_queue_dir(int parent, const char *dir, struct buf *why)
{
	int created = mkdirat(parent, QUEUE_NAME, 0700) == 0;
	if (!created && errno != EEXIST)
		return failed(why, "cannot create", dir);
	int fd = openat(parent, QUEUE_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		/* With O_DIRECTORY a symlink fails as ENOTDIR: tell the two apart for the operator. */
		int e = errno;
		struct stat lst;
		int not_dir = e == ELOOP || e == ENOTDIR;
		if (not_dir && fstatat(parent, QUEUE_NAME, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
			buf_printf(why, "%s is a symbolic link: refusing to queue through it", dir);
		else if (not_dir)
			buf_printf(why, "%s is not a directory", dir);
		else {
			errno = e;
			failed(why, "cannot open", dir);
		}
		return -1;
	}
	/* The umask may have taken bits from the mode mkdirat was given. */
	if (created && fchmod(fd, 0700) < 0) {
		failed(why, "cannot chmod", dir);
		close(fd);
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		failed(why, "cannot stat", dir);
		close(fd);
		return -1;
	}
	if (st.st_uid != 0 || (st.st_mode & 07777) != 0700) {
		buf_printf(why, "%s must be a directory owned by root with mode 0700 (it is uid %u, mode %04o): refusing to queue there",
			   dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		close(fd);
		return -1;
	}
	return fd;
}

int deletion_queue_write(const char *socket_path, const char *body, size_t len, struct buf *path, struct buf *why)
{
	struct buf parent, dir, tmp;
	buf_init(&parent, 8192);
	buf_init(&dir, 8192);
	buf_init(&tmp, 8192);
	int rc = -1;
	int pfd = -1, qfd = -1, fd = -1;
	char tmp_name[80];

	const char *slash = strrchr(socket_path, '/');
	if (!slash) {
		buf_printf(why, "socket path %s has no directory", socket_path);
		goto out;
	}
	/* dirname("/x") is "/". */
	size_t parent_len = slash == socket_path ? 1 : (size_t)(slash - socket_path);
	if (buf_append(&parent, socket_path, parent_len) < 0 ||
	    buf_printf(&dir, "%s%s" QUEUE_NAME, parent.data, parent_len == 1 ? "" : "/") < 0) {
		buf_printf(why, "socket path too long");
		goto out;
	}
	pfd = open_socket_dir(parent.data, why);
	if (pfd < 0)
		goto out;
	qfd = open_queue_dir(pfd, dir.data, why);
	if (qfd < 0)
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
	/* The agent reads the time from the name: a DEL queued before its endpoint was made is stale. */
	long long ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
	char name[64];
	int nl = snprintf(name, sizeof(name), "%lld-%02x%02x%02x%02x.json", ms, rnd[0], rnd[1], rnd[2], rnd[3]);
	int tl = snprintf(tmp_name, sizeof(tmp_name), ".%s.tmp", name);
	if (nl < 0 || (size_t)nl >= sizeof(name) || tl < 0 || (size_t)tl >= sizeof(tmp_name)) {
		buf_printf(why, "queue file name too long");
		goto out;
	}
	if (buf_printf(&tmp, "%s/%s", dir.data, tmp_name) < 0 || buf_printf(path, "%s/%s", dir.data, name) < 0) {
		buf_printf(why, "queue path too long");
		goto out;
	}
	/* A name that exists already is not ours, whatever it is: never write through or over it. */
	fd = openat(qfd, tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		failed(why, "cannot create", tmp.data);
		goto out;
	}
	if (fchmod(fd, 0600) < 0) {
		failed(why, "cannot chmod", tmp.data);
		goto out_unlink;
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
	if (renameat2(qfd, tmp_name, qfd, name, RENAME_NOREPLACE) < 0) {
		failed(why, "cannot rename", tmp.data);
		goto out_unlink;
	}
	rc = 0;
	goto out;

out_unlink:
	if (fd >= 0)
		close(fd);
	fd = -1;
	unlinkat(qfd, tmp_name, 0);
out:
	if (fd >= 0)
		close(fd);
	if (qfd >= 0)
		close(qfd);
	if (pfd >= 0)
		close(pfd);
	buf_free(&parent);
	buf_free(&dir);
	buf_free(&tmp);
	return rc;
}
