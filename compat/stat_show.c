/* ferry-stat's two views of what stat_read found: a table for people, JSON
 * for scripts (stat_show.h). */
#include "autoconfig.h"

#include "compat/stat_show.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const stat_states[] = STATMAP_STREAM_STATES;
_Static_assert(sizeof(stat_states) / sizeof(stat_states[0]) == STATMAP_NSTREAM_STATES,
	       "a name per stream state");

static const char *stat_state_name(uint32_t s)
{
	return s < STATMAP_NSTREAM_STATES ? stat_states[s] : "?";
}

/* "1.2.3.4:80", "[::1]:80", or "-"; the port left out when 0 and !port. */
static const char *stat_addr(const struct statmap_addr *a, bool port, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN];
	if ((a->family != AF_INET && a->family != AF_INET6) ||
	    !inet_ntop(a->family, a->addr, ip, sizeof(ip)))
		return "-";
	if (!port && a->port == 0)
		snprintf(buf, len, "%s", ip);
	else if (a->family == AF_INET6)
		snprintf(buf, len, "[%s]:%u", ip, a->port);
	else
		snprintf(buf, len, "%s:%u", ip, a->port);
	return buf;
}

static double stat_age_s(const struct statmap_hdr *h)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	return now > h->tables_realtime_ns ? (double)(now - h->tables_realtime_ns) / 1e9 : 0;
}

/* --- text --- */

#define C(name) ((unsigned long long)st->name)

static void stat_text_counters(FILE *out, const struct ferry_stats *st)
{
	fprintf(out, "  streams %llu connected, %llu accepted; sessions %llu (%llu closed), "
		     "dead peers %llu\n",
		C(streams_connected), C(streams_accepted), C(sessions), C(sessions_closed),
		C(dead_peers));
	fprintf(out, "  bytes %llu out, %llu in; packets %llu out, %llu in; retransmits %llu, "
		     "drops %llu\n",
		C(bytes_tx), C(bytes_rx), C(pkts_tx), C(pkts_rx), C(retransmits), C(drops));
	fprintf(out, "  fallbacks %llu", C(fallbacks));
	/* Each reason that happened: a storm of one kind shows at a glance. */
	const char *sep = ": ";
#define STAT_REASON(name)                                                          \
	if (!strncmp(#name, "fallback_", 9) && st->name) {                          \
		fprintf(out, "%s%s %llu", sep, #name + 9, (unsigned long long)st->name); \
		sep = ", ";                                                         \
	}
	FERRY_STATS_COUNTERS(STAT_REASON)
#undef STAT_REASON
	fprintf(out, "\n");
}

static void stat_text_tables(FILE *out, const struct stat_view *v, struct statmap_hdr *h)
{
	char a[64], b[64], rtt[32];
	const struct statmap_session *ses = statmap_sessions(h);
	if (h->n_sessions)
		fprintf(out, "  %-8s %-28s %10s %12s %9s %8s %8s\n", "SESSION", "PEER", "RTT(us)",
			"RATE(MB/s)", "CREDITS", "RETRANS", "DROPS");
	for (uint32_t i = 0; i < h->n_sessions; i++) {
		if (ses[i].rtt_ns)
			snprintf(rtt, sizeof(rtt), "%.1f", (double)ses[i].rtt_ns / 1e3);
		else
			snprintf(rtt, sizeof(rtt), "-");
		snprintf(b, sizeof(b), "%u/%u", ses[i].credits_used, ses[i].credits_max);
		fprintf(out, "  %-8d %-28s %10s %12.1f %9s %8" PRIu64 " %8" PRIu64 "%s\n",
			ses[i].num, stat_addr(&ses[i].peer, false, a, sizeof(a)), rtt,
			(double)ses[i].rate_bps / 1e6, b, ses[i].retransmits, ses[i].drops,
			ses[i].up ? "" : " (down)");
	}
	const struct statmap_stream *s = statmap_streams(h);
	if (h->n_streams)
		fprintf(out, "  %-24s %-24s %-11s %12s %12s %8s %8s %7s\n", "LOCAL", "PEER", "STATE",
			"BYTES-OUT", "BYTES-IN", "UNREAD", "UNACKED", "OWNER");
	for (uint32_t i = 0; i < h->n_streams; i++)
		fprintf(out, "  %-24s %-24s %-11s %12" PRIu64 " %12" PRIu64 " %8" PRIu64 " %8" PRIu64
			     " %7d\n",
			stat_addr(&s[i].local, true, a, sizeof(a)),
			stat_addr(&s[i].peer, true, b, sizeof(b)), stat_state_name(s[i].state),
			s[i].bytes_tx, s[i].bytes_rx, s[i].unread, s[i].unacked, s[i].owner);
	const struct statmap_listener *l = statmap_listeners(h);
	if (h->n_listeners)
		fprintf(out, "  %-24s %8s %8s  %s\n", "LISTENER", "QUEUED", "BACKLOG", "HELD BY");
	for (uint32_t i = 0; i < h->n_listeners; i++) {
		fprintf(out, "  %-24s %8u %8d ", stat_addr(&l[i].addr, true, a, sizeof(a)),
			l[i].queued + l[i].offers, l[i].backlog);
		const struct stat_holders *hd = stat_holders_of(v, l[i].inode);
		for (unsigned k = 0; hd && k < hd->n; k++)
			fprintf(out, " %d", (int)hd->pid[k]);
		if (!hd || !hd->n)
			fprintf(out, " %d", h->pid);
		fprintf(out, "\n");
	}
	if (h->more)
		fprintf(out, "  (%u more entries left out)\n", h->more);
}

void stat_show_text(FILE *out, const struct stat_view *v)
{
	if (!v->n)
		fprintf(out, "no ferry process%s\n", getuid() ? " of this user" : "");
	for (size_t i = 0; i < v->n; i++) {
		struct statmap_hdr *h = v->procs[i].h;
		const struct ferry_stats *st = &h->stats;
		fprintf(out, "%s%s pid %d, %s\n", i ? "\n" : "", h->program, h->pid,
			h->transport[0] ? h->transport : "starting");
		stat_text_counters(out, st);
		if (v->procs[i].tables == STAT_TABLES_NONE)
			fprintf(out, "  (counters only: the process did not answer)\n");
		else if (v->procs[i].tables == STAT_TABLES_OLD)
			fprintf(out, "  (tables as of %.1f s ago: the process did not answer)\n",
				stat_age_s(h));
		stat_text_tables(out, v, h);
	}
}

/* --- JSON --- */

static void stat_json_addr(FILE *out, const char *key, const struct statmap_addr *a, bool port)
{
	char buf[64];
	const char *s = stat_addr(a, port, buf, sizeof(buf));
	fprintf(out, "\"%s\":", key);
	if (!strcmp(s, "-"))
		fprintf(out, "null");
	else
		fprintf(out, "\"%s\"", s);
}

static void stat_json_proc(FILE *out, const struct stat_view *v, const struct stat_proc *p)
{
	struct statmap_hdr *h = p->h;
	static const char *const tables[] = {"none", "old", "current"};
	/* Names are the kernel's comm or argv[0]: printable, but quoted
	 * characters must not break the document. */
	fprintf(out, "{\"pid\":%d,\"uid\":%u,\"program\":\"", h->pid, h->uid);
	for (size_t i = 0; i < sizeof(h->program) && h->program[i]; i++) {
		unsigned char ch = (unsigned char)h->program[i];
		if (ch == '"' || ch == '\\')
			fputc('\\', out);
		fputc(ch < 0x20 ? '?' : ch, out);
	}
	fprintf(out, "\",\"transport\":\"%s\",\"tables\":\"%s\",\"counters\":{", h->transport,
		tables[p->tables]);
	const char *sep = "";
#define STAT_JSON_COUNTER(name)                                                            \
	fprintf(out, "%s\"%s\":%llu", sep, #name, (unsigned long long)h->stats.name);      \
	sep = ",";
	FERRY_STATS_COUNTERS(STAT_JSON_COUNTER)
#undef STAT_JSON_COUNTER
	fprintf(out, "},\"sessions\":[");
	const struct statmap_session *ses = statmap_sessions(h);
	for (uint32_t i = 0; i < h->n_sessions; i++) {
		fprintf(out, "%s{\"session\":%d,", i ? "," : "", ses[i].num);
		stat_json_addr(out, "peer", &ses[i].peer, false);
		fprintf(out, ",\"up\":%s,\"rtt_ns\":%" PRIu64 ",\"rate_bps\":%" PRIu64
			     ",\"credits_used\":%u,\"credits\":%u,\"retransmits\":%" PRIu64
			     ",\"drops\":%" PRIu64 "}",
			ses[i].up ? "true" : "false", ses[i].rtt_ns, ses[i].rate_bps,
			ses[i].credits_used, ses[i].credits_max, ses[i].retransmits, ses[i].drops);
	}
	fprintf(out, "],\"streams\":[");
	const struct statmap_stream *s = statmap_streams(h);
	for (uint32_t i = 0; i < h->n_streams; i++) {
		fprintf(out, "%s{", i ? "," : "");
		stat_json_addr(out, "local", &s[i].local, true);
		fputc(',', out);
		stat_json_addr(out, "peer", &s[i].peer, true);
		fprintf(out, ",\"state\":\"%s\",\"session\":%d,\"bytes_tx\":%" PRIu64
			     ",\"bytes_rx\":%" PRIu64 ",\"unread\":%" PRIu64 ",\"unacked\":%" PRIu64
			     ",\"owner\":%d}",
			stat_state_name(s[i].state), s[i].session, s[i].bytes_tx, s[i].bytes_rx,
			s[i].unread, s[i].unacked, s[i].owner);
	}
	fprintf(out, "],\"listeners\":[");
	const struct statmap_listener *l = statmap_listeners(h);
	for (uint32_t i = 0; i < h->n_listeners; i++) {
		fprintf(out, "%s{", i ? "," : "");
		stat_json_addr(out, "address", &l[i].addr, true);
		fprintf(out, ",\"queued\":%u,\"backlog\":%d,\"shared\":%s,\"holders\":[",
			l[i].queued + l[i].offers, l[i].backlog, l[i].shared ? "true" : "false");
		const struct stat_holders *hd = stat_holders_of(v, l[i].inode);
		for (unsigned k = 0; hd && k < hd->n; k++)
			fprintf(out, "%s%d", k ? "," : "", (int)hd->pid[k]);
		if (!hd || !hd->n)
			fprintf(out, "%d", h->pid);
		fprintf(out, "]}");
	}
	fprintf(out, "],\"more\":%u}", h->more);
}

void stat_show_json(FILE *out, const struct stat_view *v)
{
	fprintf(out, "{\"processes\":[");
	for (size_t i = 0; i < v->n; i++) {
		fprintf(out, "%s", i ? ",\n" : "\n");
		stat_json_proc(out, v, &v->procs[i]);
	}
	fprintf(out, "\n]}\n");
}
