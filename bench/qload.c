/* bench/qload.c: the query load of `python -m bench.scale` (query part) as a C client.
 *
 * A Python asyncio client adds its own queueing to what it measures: replies that arrive
 * together wait for each other's handling (bench/README.md, "query"). This client spends
 * microseconds per reply, so the latency it reports is the server's and the network stack's.
 *
 *   qload HOST PORT PROTO CONNS QPS START_NS REQUESTS OUT [GRACE_S]
 *
 * PROTO is "line" (one reply line per request: arenad's query port), "resp" (one RESP reply: Redis)
 * or "http" (one HTTP/1.1 response framed by Content-Length: arenad's web port; an error is a
 * status of 400 or more).
 * REQUESTS holds the requests back to back, each preceded by its length as a 4-byte little-endian
 * integer. Request j is due at START_NS (CLOCK_MONOTONIC) + j / QPS seconds on connection
 * j % CONNS; a connection still waiting for its previous reply sends when that reply is in
 * (open loop per connection, as the Python client). OUT receives, per request, three doubles:
 * latency (reply complete - request sent), lag (reply complete - due) in seconds, and 1.0 if the
 * reply was an error, else 0.0 (with "http": the status code instead); all three 0.0 for a request
 * not answered in time. It stops
 * GRACE_S seconds (default 60) after the last request is due. Exit status 0 when every request
 * was answered, 5 when some were not.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;
    long next;     /* next request index of this connection */
    long waiting;  /* request awaiting its reply, or -1 */
    double sent;   /* when it was sent */
    char buf[1 << 20]; /* a web page or a 256-player batch answer is tens of KB */
    size_t len;
} Conn;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Length of one complete RESP reply at p[0..n), 0 if incomplete; *err set for an error reply. */
static size_t resp_reply(const char *p, size_t n, int *err) {
    const char *eol = memchr(p, '\n', n);
    if (!eol || n < 1) return 0;
    size_t head = (size_t)(eol - p) + 1;
    long v = strtol(p + 1, NULL, 10);
    switch (p[0]) {
    case '+': case ':': return head;
    case '-': *err = 1; return head;
    case '$':
        if (v < 0) return head;
        return n >= head + (size_t)v + 2 ? head + (size_t)v + 2 : 0;
    case '*': {
        size_t at = head;
        for (long i = 0; i < v; i++) {
            size_t one = resp_reply(p + at, n - at, err);
            if (!one) return 0;
            at += one;
        }
        return at;
    }
    default: *err = 1; return head;
    }
}

/* Length of one complete HTTP response at p[0..n) framed by Content-Length, 0 if incomplete. */
static size_t http_reply(const char *p, size_t n, int *status_out) {
    const char *end = memmem(p, n, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t head = (size_t)(end - p) + 4;
    long status = n > 12 ? strtol(p + 9, NULL, 10) : 0;
    long length = 0;
    for (const char *line = memchr(p, '\n', head); line && line < end; line = memchr(line + 1, '\n', (size_t)(end - line))) {
        if (strncasecmp(line + 1, "content-length:", 15) == 0) length = strtol(line + 16, NULL, 10);
    }
    *status_out = (int)status;
    return n >= head + (size_t)length ? head + (size_t)length : 0;
}

int main(int argc, char **argv) {
    if (argc != 9 && argc != 10) {
        fprintf(stderr, "usage: qload HOST PORT PROTO CONNS QPS START_NS REQUESTS OUT [GRACE_S]\n");
        return 2;
    }
    const char *host = argv[1], *port = argv[2];
    int resp = strcmp(argv[3], "resp") == 0, http = strcmp(argv[3], "http") == 0;
    int nconn = atoi(argv[4]);
    double qps = atof(argv[5]);
    double start = (double)atoll(argv[6]) * 1e-9;
    FILE *rf = fopen(argv[7], "rb");
    if (!rf || nconn < 1 || qps <= 0) return 2;
    fseek(rf, 0, SEEK_END);
    long size = ftell(rf);
    fseek(rf, 0, SEEK_SET);
    char *raw = malloc((size_t)size + 1);
    if (!raw || fread(raw, 1, (size_t)size, rf) != (size_t)size) return 2;
    fclose(rf);
    long total = 0;
    for (long at = 0; at + 4 <= size; total++) {
        uint32_t len;
        memcpy(&len, raw + at, 4);
        at += 4 + (long)len;
    }
    char **req = malloc(sizeof(char *) * (size_t)total);
    uint32_t *req_len = malloc(sizeof(uint32_t) * (size_t)total);
    double *out = calloc((size_t)total * 3, sizeof(double));
    if (!req || !req_len || !out) return 2;
    for (long j = 0, at = 0; j < total; j++) {
        memcpy(&req_len[j], raw + at, 4);
        req[j] = raw + at + 4;
        at += 4 + (long)req_len[j];
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0) return 2;
    int ep = epoll_create1(0);
    Conn *conns = calloc((size_t)nconn, sizeof(Conn));
    for (int i = 0; i < nconn; i++) {
        int fd = socket(ai->ai_family, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            perror("connect");
            return 2;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conns[i] = (Conn){.fd = fd, .next = i, .waiting = -1};
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    freeaddrinfo(ai);
    int tfd = timerfd_create(CLOCK_MONOTONIC, 0);
    struct epoll_event tev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);
    long answered = 0;
    double deadline = start + (double)total / qps + (argc == 10 ? atof(argv[9]) : 60.0);
    while (answered < total && now_s() < deadline) {
        /* Send every request that is due on an idle connection; arm the timer for the next. */
        double t = now_s(), next_due = -1.0;
        for (int i = 0; i < nconn; i++) {
            Conn *c = &conns[i];
            if (c->waiting >= 0 || c->next >= total) continue;
            double due = start + (double)c->next / qps;
            if (due <= t) {
                const char *p = req[c->next];
                size_t left = req_len[c->next];
                while (left) { /* requests are small: a blocking-style loop is enough */
                    ssize_t w = write(c->fd, p, left);
                    if (w < 0 && errno != EINTR && errno != EAGAIN) return 3;
                    if (w > 0) { p += w; left -= (size_t)w; }
                }
                c->sent = now_s();
                c->waiting = c->next;
                c->next += nconn;
            } else if (next_due < 0 || due < next_due) {
                next_due = due;
            }
        }
        if (next_due > 0) {
            struct itimerspec its = {0};
            its.it_value.tv_sec = (time_t)next_due;
            its.it_value.tv_nsec = (long)((next_due - (double)(time_t)next_due) * 1e9);
            timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
        }
        struct epoll_event evs[64];
        int n = epoll_wait(ep, evs, 64, 1000);
        for (int k = 0; k < n; k++) {
            if (evs[k].data.u32 == UINT32_MAX) {
                uint64_t ticks;
                if (read(tfd, &ticks, sizeof ticks) < 0) { /* nothing: just woken up */ }
                continue;
            }
            Conn *c = &conns[evs[k].data.u32];
            ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - c->len);
            if (r <= 0) return 4; /* the server closed the connection */
            c->len += (size_t)r;
            for (;;) {
                int err = 0;
                size_t used;
                if (http) {
                    used = http_reply(c->buf, c->len, &err);
                } else if (resp) {
                    used = c->len ? resp_reply(c->buf, c->len, &err) : 0;
                } else {
                    char *eol = memchr(c->buf, '\n', c->len);
                    used = eol ? (size_t)(eol - c->buf) + 1 : 0;
                    if (used) err = !(strncmp(c->buf, "{\"ok\":true", 10) == 0 || strncmp(c->buf, "{\"ok\": true", 11) == 0);
                }
                if (!used || c->waiting < 0) break;
                double done = now_s();
                long j = c->waiting;
                out[3 * j] = done - c->sent;
                out[3 * j + 1] = done - (start + (double)j / qps);
                out[3 * j + 2] = http ? (double)err : err ? 1.0 : 0.0;
                answered++;
                c->waiting = -1;
                memmove(c->buf, c->buf + used, c->len - used);
                c->len -= used;
            }
        }
    }
    FILE *of = fopen(argv[8], "wb");
    if (!of || fwrite(out, sizeof(double), (size_t)total * 3, of) != (size_t)total * 3) return 2;
    fclose(of);
    return answered == total ? 0 : 5;
}
