/* A minimal streaming OpenAI-compatible chat server in C, for measuring clients at high rates.
 *
 *     cc -O2 -o stub_sse_server benchmarks/stub_sse_server.c && ./stub_sse_server --port 8000
 *
 * benchmarks/stub_openai_server.py's wire (one SSE event per token, each its own TCP send, one
 * event per connection per event-loop turn; usage, [DONE] and the last chunk together at the end)
 * at a fraction of its CPU: a client's maximum rate is only measurable against a server that
 * can take it, and on one core the Python servers saturate near 1,000 streamed requests/s.
 * Answers POST /v1/chat/completions (streamed; max_tokens or max_completion_tokens tokens, default 16),
 * GET /v1/models and GET /stub/stats ({"requests": N}); anything else is 404 (no /health, no
 * /tokenize: a client counts prompts itself). Prints "listening on PORT" once bound.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_FD 65536
#define IN_MAX 65536

typedef struct {
    int fd, inlen, streaming, sent, n_out, prompt, usage, headlen;
    char in[IN_MAX];
    char head[192];
} Conn;

static Conn *conns[MAX_FD];
static int active[MAX_FD], nactive;
static long served;
static const char *WORDS[] = {"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with",
                              "be", "by", "on", "not", "this", "are", "or", "from", "at"};
#define NWORDS (sizeof WORDS / sizeof *WORDS)

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) { p += w; n -= (size_t)w; continue; }
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            poll(&pfd, 1, 1000);
            continue;
        }
        return; /* the peer is gone: its read side will close the connection */
    }
}

static void chunk(int fd, const char *payload, int len) {
    char buf[1024];
    int h = snprintf(buf, sizeof buf, "%x\r\n", len);
    memcpy(buf + h, payload, (size_t)len);
    memcpy(buf + h + len, "\r\n", 2);
    write_all(fd, buf, (size_t)(h + len + 2));
}

static void json(int fd, int status, const char *body) {
    char buf[1024];
    const char *reason = status == 200 ? "OK" : status == 404 ? "Not Found" : "Bad Request";
    int n = snprintf(buf, sizeof buf, "HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n\r\n%s",
                     status, reason, strlen(body), body);
    write_all(fd, buf, (size_t)n);
}

static void close_conn(int ep, Conn *c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->streaming)
        for (int i = 0; i < nactive; i++)
            if (active[i] == c->fd) { active[i] = active[--nactive]; break; }
    conns[c->fd] = NULL;
    free(c);
}

/* The value after "key": in a JSON body, past any spaces (compact JSON or json.dumps' ": "), or NULL. */
static const char *value_of(const char *s, const char *end, const char *key) {
    size_t k = strlen(key);
    for (const char *p = s; (p = memmem(p, (size_t)(end - p), key, k)) != NULL; p += k) {
        const char *v = p + k;
        while (v < end && *v == ' ') v++;
        if (v < end && *v == ':') {
            for (v++; v < end && *v == ' '; v++) {}
            return v;
        }
    }
    return NULL;
}

static int int_after(const char *s, const char *end, const char *key, int dflt) {
    const char *v = value_of(s, end, key);
    return v ? atoi(v) : dflt;
}

static int is_true(const char *s, const char *end, const char *key) {
    const char *v = value_of(s, end, key);
    return v && end - v >= 4 && !strncmp(v, "true", 4);
}

static int words_in_content(const char *s, const char *end) {
    const char *p = value_of(s, end, "\"content\"");
    if (!p || *p != '"') return 0;
    int n = 1;
    for (p++; p < end && *p != '"'; p++) n += *p == ' ';
    return n;
}

static void start_stream(Conn *c, const char *body, int blen) {
    const char *end = body + blen;
    c->n_out = int_after(body, end, "\"max_tokens\"", -1);
    if (c->n_out < 0) c->n_out = int_after(body, end, "\"max_completion_tokens\"", 16);  /* vllm bench serve's */
    if (c->n_out < 1) c->n_out = 1;
    c->usage = is_true(body, end, "\"include_usage\"");
    c->prompt = words_in_content(body, end);
    c->sent = 0;
    served++;
    c->headlen = snprintf(c->head, sizeof c->head,
                          "data: {\"id\":\"chatcmpl-%d-%ld\",\"object\":\"chat.completion.chunk\",\"created\":%ld,"
                          "\"model\":\"tiny\",\"choices\":[", getpid(), served, (long)time(NULL));
    char ev[512];
    int n = snprintf(ev, sizeof ev, "%.*s{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                     "\"finish_reason\":null}]}\n\n", c->headlen, c->head);
    static const char hdr[] = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                              "transfer-encoding: chunked\r\n\r\n";
    write_all(c->fd, hdr, sizeof hdr - 1);
    chunk(c->fd, ev, n);
    c->streaming = 1;
    active[nactive++] = c->fd;
}

/* One event of a stream: the next token, and after the last token the closing events. */
static int step(Conn *c) {
    char ev[512];
    int i = c->sent;
    const char *finish = i == c->n_out - 1 ? "\"length\"" : "null";
    int n = snprintf(ev, sizeof ev, "%.*s{\"index\":0,\"delta\":{\"content\":\"%s%s\"},\"finish_reason\":%s}]}\n\n",
                     c->headlen, c->head, i ? " " : "", WORDS[i % NWORDS], finish);
    chunk(c->fd, ev, n);
    if (++c->sent < c->n_out) return 0;
    char tail[1024];
    int t = 0;
    if (c->usage) {
        n = snprintf(ev, sizeof ev, "%.*s],\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\n",
                     c->headlen, c->head, c->prompt, c->prompt + c->n_out, c->n_out);
        t += snprintf(tail + t, sizeof tail - (size_t)t, "%x\r\n%.*s\r\n", n, n, ev);
    }
    t += snprintf(tail + t, sizeof tail - (size_t)t, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n");
    write_all(c->fd, tail, (size_t)t);
    c->streaming = 0;
    return 1;
}

/* Answer every complete request in the buffer (one at a time while a stream is open). */
static int serve_requests(Conn *c) {
    while (!c->streaming) {
        char *hend = memmem(c->in, (size_t)c->inlen, "\r\n\r\n", 4);
        if (!hend) return c->inlen < IN_MAX ? 0 : -1;
        int hlen = (int)(hend - c->in) + 4;
        int clen = 0;
        for (char *p = c->in; p < hend; p++)
            if ((p == c->in || p[-1] == '\n') && !strncasecmp(p, "content-length:", 15)) clen = atoi(p + 15);
        if (clen < 0 || hlen + clen > IN_MAX) return -1;
        if (c->inlen < hlen + clen) return 0;
        char *body = c->in + hlen;
        if (!strncmp(c->in, "POST /v1/chat/completions ", 26)) {
            if (is_true(body, body + clen, "\"stream\"")) start_stream(c, body, clen);
            else json(c->fd, 400, "{\"error\":{\"message\":\"this stub answers streamed requests only\",\"code\":400}}");
        } else if (!strncmp(c->in, "GET /v1/models ", 15)) {
            json(c->fd, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"tiny\",\"object\":\"model\",\"owned_by\":\"stub\"}]}");
        } else if (!strncmp(c->in, "GET /stub/stats ", 16)) {
            char b[64];
            snprintf(b, sizeof b, "{\"requests\":%ld}", served);
            json(c->fd, 200, b);
        } else {
            json(c->fd, 404, "{\"detail\":\"Not Found\"}");
        }
        memmove(c->in, c->in + hlen + clen, (size_t)(c->inlen - hlen - clen));
        c->inlen -= hlen + clen;
    }
    return 0;
}

int main(int argc, char **argv) {
    int port = 8000;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--port")) port = atoi(argv[++i]);
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 4096)) { perror("bind/listen"); return 1; }
    socklen_t al = sizeof a;
    getsockname(ls, (struct sockaddr *)&a, &al);
    printf("listening on %d\n", ntohs(a.sin_port));
    fflush(stdout);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls}, evs[512];
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    for (;;) {
        int n = epoll_wait(ep, evs, 512, nactive ? 0 : -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int cfd;
                while ((cfd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (cfd >= MAX_FD) { close(cfd); continue; }
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    Conn *c = calloc(1, sizeof *c);
                    c->fd = cfd;
                    conns[cfd] = c;
                    struct epoll_event ce = {.events = EPOLLIN, .data.fd = cfd};
                    epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ce);
                }
                continue;
            }
            Conn *c = conns[fd];
            if (!c) continue;
            ssize_t r = read(fd, c->in + c->inlen, (size_t)(IN_MAX - c->inlen));
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) { close_conn(ep, c); continue; }
            if (r > 0) c->inlen += (int)r;
            if (serve_requests(c) < 0) close_conn(ep, c);
        }
        for (int i = 0; i < nactive;) { /* one event per open stream per turn */
            Conn *c = conns[active[i]];
            if (step(c)) {
                active[i] = active[--nactive];
                if (serve_requests(c) < 0) close_conn(ep, c); /* a request pipelined behind the stream */
            } else {
                i++;
            }
        }
    }
}
