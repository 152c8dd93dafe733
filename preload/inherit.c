/*
 * Descriptors carried across exec. exec replaces ferry with the new
 * program's ferry, which knows nothing of the descriptors it inherits; the
 * old image writes what they are into FERRY_INHERIT, and the new one reads
 * it at load, before main:
 *  - a stream another process runs (a fork child's copy, handover.h): the
 *    new program takes it over at first use, as the child would have (an
 *    inetd-style server forks, dup2s the connection to 0 and 1, and execs);
 *  - a listener: its rendezvous socket is carried too (not close-on-exec),
 *    and the new program answers on it once it accepts (lshare.h), as with
 *    nginx's binary upgrade.
 * A stream this very process runs cannot follow: its state lives in the
 * image exec discards; the new program sees a socket that is not connected.
 * A program this process spawns without fork (posix_spawn) gets this
 * process's own streams too: this process still runs them and hands each
 * over at the program's first use, as to a fork child. The program may hold
 * them at other numbers (the spawn's file actions dup2 them to 0 and 1 out
 * of ferry's sight), so it finds them by their kernel socket's inode.
 * Listeners handed over by systemd-style socket activation (LISTEN_FDS)
 * become ferry listeners the same way, with a rendezvous socket of their own.
 * So does a socket another process made and this one made listen: node's
 * cluster binds in its primary and sends the bound socket to each worker,
 * which listens and accepts there.
 */
#include "autoconfig.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/inherit.h"
#include "preload/reentry.h"
#include "preload/sock.h"
#include "preload/stdfile.h"
#include "preload/sockaddr.h"
#include "preload/stream.h"
#include "transport/sys.h"

#define INHERIT_VAR "FERRY_INHERIT"

#define IB_FILES_MAX 256

struct ib_item;

struct inherit_buf {
	char *s;
	size_t len, cap;
	int *dups; /* rendezvous duplicates made for this exec */
	size_t ndups, capdups;
	struct ffile *files[IB_FILES_MAX]; /* files written already */
	size_t nfiles;
	bool own_streams; /* for a spawned program: this process's streams too */
	struct ib_item *items; /* files to describe, taken under the table lock */
	size_t nitems, capitems;
};

static void ib_add(struct inherit_buf *b, const char *entry)
{
	size_t n = strlen(entry);
	if (b->len + n + 2 > b->cap) {
		size_t cap = (b->cap ? b->cap * 2 : 256) + n;
		char *s = realloc(b->s, cap);
		if (!s)
			return;
		b->s = s;
		b->cap = cap;
	}
	if (b->len)
		b->s[b->len++] = ',';
	memcpy(b->s + b->len, entry, n + 1);
	b->len += n;
}

/* A duplicate of a listener's rendezvous socket that survives exec, at a
 * number the new program is not about to get. */
static int ib_rendezvous(struct inherit_buf *b, int rdv)
{
	if (b->ndups == b->capdups) {
		size_t cap = b->capdups ? 2 * b->capdups : 4;
		int *d = realloc(b->dups, cap * sizeof(*d));
		if (!d)
			return -1;
		b->dups = d;
		b->capdups = cap;
	}
	int fd = sys()->fcntl(rdv, F_DUPFD, 64);
	if (fd >= 0)
		b->dups[b->ndups++] = fd;
	return fd;
}

static bool ib_seen(struct inherit_buf *b, struct ffile *f)
{
	for (size_t i = 0; i < b->nfiles; i++)
		if (b->files[i] == f)
			return true;
	if (b->nfiles < IB_FILES_MAX)
		b->files[b->nfiles++] = f;
	return false;
}

bool inherit_describe(struct ffile *f, bool own_streams, struct inherit_desc *d)
{
	struct fsock *sk = f->priv;
	if (f->kind != FFILE_SOCK || !sk)
		return false;
	memset(d, 0, sizeof(*d));
	d->nonblock = ffile_nonblock(f);
	d->rdv = -1;
	if (sk->state == FSOCK_REMOTE) {
		d->kind = 'S';
		d->pid = (int)sk->remote_pid;
		d->sid = sk->remote_sid;
		d->peer_sid = sk->remote_peer_sid;
		d->token = sk->remote_token;
		return true;
	}
	if (sk->state == FSOCK_LISTEN && sk->lis_rdv >= 0) {
		d->kind = 'L';
		d->rdv = sk->lis_rdv;
		d->backlog = sk->lis_backlog;
		return true;
	}
	if (!own_streams || sk->state != FSOCK_STREAM)
		return false;
	bool ok = false;
	ferry_lock();
	struct stream *s = sk->stream;
	/* One that ended goes too: its new holder reads it as it reads here
	 * (the bytes and EOF after the peer's FIN, else a reset), where an
	 * undescribed one would read as unconnected. */
	if (s && s->state != STREAM_OPENING) {
		d->kind = 'S';
		d->pid = (int)getpid();
		d->sid = s->sid;
		d->peer_sid = s->peer_sid;
		d->token = s->token;
		ok = true;
	}
	ferry_unlock();
	return ok;
}

/* A file's numbers, copied under the table's lock (f->fds is read
 * directly); the file is described after it, outside: describing a stream
 * this process runs takes the endpoint lock, which goes first. */
struct ib_item {
	struct ffile *f; /* a reference */
	int *fds;
	unsigned nfds;
};

static void ib_collect(struct ffile *f, void *arg)
{
	struct inherit_buf *b = arg;
	/* Called once per number: the file's numbers are all taken at its first. */
	if (f->nfds == 0 || f->kind != FFILE_SOCK || ib_seen(b, f))
		return;
	if (b->nitems == b->capitems) {
		size_t cap = b->capitems ? 2 * b->capitems : 16;
		struct ib_item *items = realloc(b->items, cap * sizeof(*items));
		if (!items)
			return;
		b->items = items;
		b->capitems = cap;
	}
	int *fds = malloc(f->nfds * sizeof(*fds));
	if (!fds)
		return;
	memcpy(fds, f->fds, f->nfds * sizeof(*fds));
	ffile_get(f);
	b->items[b->nitems++] = (struct ib_item){.f = f, .fds = fds, .nfds = f->nfds};
}

static void ib_describe(struct inherit_buf *b, const struct ib_item *it)
{
	struct inherit_desc d;
	if (!inherit_describe(it->f, b->own_streams, &d))
		return;
	for (unsigned i = 0; i < it->nfds; i++) {
		int fd = it->fds[i];
		int fl = sys()->fcntl(fd, F_GETFD);
		struct stat st;
		/* A spawn's file actions dup2 a close-on-exec number (Python's
		 * sockets all are) to one that survives: its stream goes too. */
		bool cloexec = fl >= 0 && (fl & FD_CLOEXEC) && !(b->own_streams && d.kind == 'S');
		if (fl < 0 || cloexec || fstat(fd, &st) != 0)
			continue;
		char e[160];
		if (d.kind == 'S') {
			snprintf(e, sizeof(e), "S%d:%d:%d:%" PRIu32 ":%" PRIu32 ":%" PRIx64 ":%ju", fd,
				 d.nonblock, d.pid, d.sid, d.peer_sid, d.token, (uintmax_t)st.st_ino);
		} else {
			int rdv = ib_rendezvous(b, d.rdv);
			if (rdv < 0)
				continue;
			snprintf(e, sizeof(e), "L%d:%d:%d:%d:%ju", fd, d.nonblock, rdv, d.backlog,
				 (uintmax_t)st.st_ino);
		}
		ib_add(b, e);
	}
}

void inherit_env_make(struct inherit_env *e, char *const envp[], bool spawn)
{
	e->envp = envp;
	e->owned = NULL;
	e->buf = NULL;
	if (ferry_internal() || !fdtab.slots)
		return;
	struct inherit_buf *b = calloc(1, sizeof(*b));
	if (!b)
		return;
	e->buf = b;
	b->own_streams = spawn;
	/* Whose list it is: an exec keeps the pid (P), a spawned program is
	 * this one's child (Q). A program that finds another's list (passed on
	 * by a program without ferry) leaves it alone. */
	char who[32];
	snprintf(who, sizeof(who), "%c%d", spawn ? 'Q' : 'P', (int)getpid());
	ib_add(b, who);
	size_t bare = b->len;
	fdtable_each(&fdtab, ib_collect, b);
	for (size_t i = 0; i < b->nitems; i++) {
		ib_describe(b, &b->items[i]);
		ffile_put(&fdtab, b->items[i].f);
		free(b->items[i].fds);
	}
	free(b->items);
	b->items = NULL;
	b->nitems = b->capitems = 0;
	if (b->len == bare)
		return;
	size_t n = 0;
	while (envp && envp[n])
		n++;
	char **env = malloc((n + 2) * sizeof(*env));
	char *var = malloc(sizeof(INHERIT_VAR) + 1 + b->len);
	if (!env || !var) {
		free(env);
		free(var);
		return;
	}
	sprintf(var, INHERIT_VAR "=%s", b->s);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(envp[i], INHERIT_VAR "=", sizeof(INHERIT_VAR)) != 0)
			env[k++] = envp[i];
	env[k++] = var;
	env[k] = NULL;
	e->owned = env;
	e->envp = env;
}

void inherit_env_drop(struct inherit_env *e)
{
	int saved = errno;
	struct inherit_buf *b = e->buf;
	if (b) {
		for (size_t i = 0; i < b->ndups; i++)
			sys()->close(b->dups[i]);
		free(b->dups);
		free(b->s);
		free(b);
	}
	if (e->owned) {
		for (size_t i = 0; e->owned[i]; i++)
			if (!strncmp(e->owned[i], INHERIT_VAR "=", sizeof(INHERIT_VAR)))
				free(e->owned[i]);
		free(e->owned);
	}
	e->buf = NULL;
	e->owned = NULL;
	errno = saved;
}

/* exec returns only when it failed: then nothing was carried. */
FERRY_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	struct inherit_env e;
	inherit_env_make(&e, envp, false);
	int rc = sys()->execve(path, argv, e.envp);
	inherit_env_drop(&e);
	return rc;
}

FERRY_EXPORT int execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

FERRY_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	struct inherit_env e;
	inherit_env_make(&e, envp, false);
	int rc = sys()->execvpe(file, argv, e.envp);
	inherit_env_drop(&e);
	return rc;
}

FERRY_EXPORT int execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

/* The execl family's arguments as an array (malloc'd: exec frees it all
 * when it succeeds); with_env takes the environment that follows them. */
static char **execl_argv(const char *first, va_list ap, bool with_env, char *const **envp)
{
	va_list count;
	va_copy(count, ap);
	size_t argc = 1;
	while (va_arg(count, char *))
		argc++;
	va_end(count);
	char **argv = malloc((argc + 1) * sizeof(*argv));
	if (!argv)
		return NULL;
	argv[0] = (char *)first;
	for (size_t i = 1; i <= argc; i++)
		argv[i] = va_arg(ap, char *);
	if (with_env)
		*envp = va_arg(ap, char *const *);
	return argv;
}

FERRY_EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	char **argv = execl_argv(arg, ap, false, NULL);
	va_end(ap);
	int rc = argv ? execve(path, argv, environ) : -1;
	free(argv);
	return rc;
}

FERRY_EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	char **argv = execl_argv(arg, ap, false, NULL);
	va_end(ap);
	int rc = argv ? execvpe(file, argv, environ) : -1;
	free(argv);
	return rc;
}

FERRY_EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	char *const *envp = NULL;
	va_start(ap, arg);
	char **argv = execl_argv(arg, ap, true, &envp);
	va_end(ap);
	int rc = argv ? execve(path, argv, envp) : -1;
	free(argv);
	return rc;
}

/* --- the new program --- */

static bool inherit_tcp(int fd, int *domain, bool *listening)
{
	const struct sys_fns *c = sys();
	struct stat st;
	int proto = 0, acc = 0;
	socklen_t l = sizeof(int), l2 = sizeof(int), l3 = sizeof(int);
	if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) ||
	    c->getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l) != 0 || proto != IPPROTO_TCP ||
	    c->getsockopt(fd, SOL_SOCKET, SO_DOMAIN, domain, &l2) != 0 ||
	    (*domain != AF_INET && *domain != AF_INET6) ||
	    c->getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l3) != 0)
		return false;
	*listening = acc != 0;
	return true;
}

static struct fsock *inherit_listener(int fd, int domain, bool nb, int rdv, int backlog)
{
	struct fsock *sk = sock_adopt_inherited(fd, domain, nb);
	if (!sk) {
		if (rdv >= 0)
			sys()->close(rdv);
		return NULL;
	}
	sk->state = FSOCK_LISTEN;
	sk->bound = true;
	sk->lis_backlog = backlog > 0 ? backlog : SOMAXCONN;
	sk->lis_rdv = rdv >= 0 ? sys()->fcntl(rdv, F_DUPFD_CLOEXEC, rdv) : -1;
	if (rdv >= 0)
		sys()->close(rdv);
	sk->lis_inherited = true;
	sk->lis_shared = true;
	sk->file->hybrid = true; /* plain clients still come through the kernel */
	/* The kernel side is only ever polled, as a listener's made here: the
	 * application's blocking mode is the file's (nb). */
	int fl = sys()->fcntl(fd, F_GETFL);
	if (fl >= 0)
		sys()->fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	__atomic_store_n(&sk->file->mask, 0, __ATOMIC_RELEASE);
	return sk;
}

void inherit_listen_foreign(int fd, int backlog)
{
	int domain;
	bool listening;
	if (!inherit_tcp(fd, &domain, &listening) || !listening || !ferry_up())
		return;
	struct sockaddr_storage a;
	socklen_t alen = sizeof(a);
	if (sys()->getsockname(fd, (struct sockaddr *)&a, &alen) != 0 ||
	    !preload_config_port_allowed(&ferry.pcfg, sockaddr_port((struct sockaddr *)&a)))
		return;
	int fl = sys()->fcntl(fd, F_GETFL);
	struct fsock *sk = inherit_listener(fd, domain, fl >= 0 && (fl & O_NONBLOCK), -1, backlog);
	if (sk)
		sk->lis_reuse = true;
}

struct inherit_match {
	const struct inherit_desc *d;
	struct ffile *found; /* a reference */
};

static void inherit_match_file(struct ffile *f, void *arg)
{
	struct inherit_match *m = arg;
	const struct fsock *sk = f->priv;
	if (m->found || f->kind != FFILE_SOCK || !sk || sk->state != FSOCK_REMOTE ||
	    sk->remote_pid != m->d->pid || sk->remote_sid != m->d->sid ||
	    sk->remote_token != m->d->token)
		return;
	ffile_get(f);
	m->found = f;
}

/* Numbers of one stream (inetd's 0 and 1, or a stream passed twice) share
 * one file, as dup's do. */
static bool inherit_stream(int fd, int domain, const struct inherit_desc *d)
{
	struct inherit_match m = {.d = d};
	fdtable_each(&fdtab, inherit_match_file, &m);
	if (m.found) {
		int rc = fdtable_install(&fdtab, fd, m.found);
		ffile_put(&fdtab, m.found);
		if (rc == 0)
			return true;
	}
	struct fsock *sk = sock_adopt_inherited(fd, domain, d->nonblock);
	if (!sk)
		return false;
	sk->state = FSOCK_REMOTE;
	sk->remote_pid = d->pid;
	sk->remote_sid = d->sid;
	sk->remote_peer_sid = d->peer_sid;
	sk->remote_token = d->token;
	__atomic_store_n(&sk->file->mask, 0, __ATOMIC_RELEASE);
	return true;
}

bool inherit_take(int fd, const struct inherit_desc *d)
{
	int domain;
	bool listening;
	bool tcp = inherit_tcp(fd, &domain, &listening);
	if (d->kind == 'S' && tcp && !listening)
		return inherit_stream(fd, domain, d);
	if (d->kind == 'L' && tcp && listening) {
		inherit_listener(fd, domain, d->nonblock, d->rdv, d->backlog);
		return true;
	}
	if (d->kind == 'L' && d->rdv >= 0)
		sys()->close(d->rdv);
	return false;
}

/* An entry of the list: its description, the number it had, and its
 * kernel socket's inode (0 from an older ferry). */
static bool inherit_parse(const char *e, struct inherit_desc *d, int *fd, uintmax_t *ino)
{
	*d = (struct inherit_desc){.kind = e[0], .rdv = -1};
	*ino = 0;
	if (e[0] == 'S')
		return sscanf(e + 1, "%d:%d:%d:%" SCNu32 ":%" SCNu32 ":%" SCNx64 ":%ju", fd,
			      &d->nonblock, &d->pid, &d->sid, &d->peer_sid, &d->token, ino) >= 6;
	if (e[0] == 'L')
		return sscanf(e + 1, "%d:%d:%d:%d:%ju", fd, &d->nonblock, &d->rdv, &d->backlog,
			      ino) >= 4;
	return false;
}

#define INHERIT_SPAWNED_MAX 64

struct inherit_spawned {
	struct inherit_desc d;
	uintmax_t ino;
	struct ffile *file; /* a listener taken up: its other numbers share it */
};

/* A spawned program's sockets are wherever the spawn's file actions put
 * them: every number of a described kernel socket is taken up. */
static void inherit_by_inode(struct inherit_spawned *list, size_t n)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;
	while (dir && (de = readdir(dir)) != NULL) {
		struct stat st;
		int fd = atoi(de->d_name);
		if (de->d_name[0] == '.' || fd == dirfd(dir) || fdtable_maybe(&fdtab, fd) ||
		    fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
			continue;
		for (size_t i = 0; i < n; i++) {
			struct inherit_spawned *p = &list[i];
			if (p->ino != (uintmax_t)st.st_ino)
				continue;
			/* A stream's numbers find each other (inherit_stream). */
			if (p->file)
				fdtable_install(&fdtab, fd, p->file);
			else if (inherit_take(fd, &p->d) && p->d.kind == 'L')
				p->file = fdtable_get(&fdtab, fd);
			if (p->d.kind == 'L')
				p->d.rdv = -1; /* taken, or closed by inherit_take */
			break;
		}
	}
	if (dir)
		closedir(dir);
	for (size_t i = 0; i < n; i++) {
		if (list[i].file)
			ffile_put(&fdtab, list[i].file);
		else if (list[i].d.kind == 'L' && list[i].d.rdv >= 0)
			sys()->close(list[i].d.rdv); /* the program has no number of it */
	}
}

/* The list after its owner: P (this very process, before exec) takes each
 * entry at its number; Q (the parent that spawned us) by inode. */
static void inherit_list(char *list)
{
	char *save = NULL, *e = strtok_r(list, ",", &save);
	if (!e || (e[0] != 'P' && e[0] != 'Q'))
		return;
	bool spawned = e[0] == 'Q';
	if (atoi(e + 1) != (int)(spawned ? getppid() : getpid()))
		return;
	struct inherit_spawned found[INHERIT_SPAWNED_MAX];
	size_t n = 0;
	while ((e = strtok_r(NULL, ",", &save))) {
		struct inherit_desc d;
		int fd;
		uintmax_t ino;
		if (!inherit_parse(e, &d, &fd, &ino))
			continue;
		if (!spawned)
			inherit_take(fd, &d);
		else if (ino && n < INHERIT_SPAWNED_MAX)
			found[n++] = (struct inherit_spawned){.d = d, .ino = ino};
		else if (d.kind == 'L' && d.rdv >= 0)
			sys()->close(d.rdv);
	}
	if (n)
		inherit_by_inode(found, n);
}

/* systemd's protocol: LISTEN_FDS sockets from 3 on, for LISTEN_PID. */
static void inherit_activation(void)
{
	const char *n = getenv("LISTEN_FDS"), *pid = getenv("LISTEN_PID");
	if (!n || !pid || atoi(pid) != (int)getpid())
		return;
	int count = atoi(n);
	for (int fd = 3; fd < 3 + count && count > 0 && count < 4096; fd++) {
		int domain;
		bool listening;
		if (!fdtable_maybe(&fdtab, fd) && inherit_tcp(fd, &domain, &listening) && listening)
			inherit_listener(fd, domain, sys()->fcntl(fd, F_GETFL) & O_NONBLOCK, -1, 0);
	}
}

__attribute__((constructor)) static void inherit_constructor(void)
{
	const char *list = getenv(INHERIT_VAR);
	const char *enable = getenv("FERRY_ENABLE");
	bool on = !enable || strcmp(enable, "0") != 0;
	if (!list && !getenv("LISTEN_FDS"))
		return;
	sys_resolve();
	if (on && (fdtab.slots || fdtable_init(&fdtab, 0) == 0)) {
		char *copy = list ? strdup(list) : NULL;
		if (copy)
			inherit_list(copy);
		free(copy);
		inherit_activation();
		for (int fd = 0; fd <= 2; fd++)
			stdfile_take_std(fd);
	}
	unsetenv(INHERIT_VAR); /* for this image only; its own exec writes it anew */
}
