#ifndef FERRY_CCURL_SHIM_H
#define FERRY_CCURL_SHIM_H
#include <curl/curl.h>
#include <dlfcn.h>
#include <locale.h>
#include <string.h>

/* curl_easy_setopt / curl_multi_setopt / curl_easy_getinfo are variadic:
   Swift cannot call them, so each argument type gets a typed wrapper. */
static inline CURLcode ferry_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ferry_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ferry_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ferry_easy_setopt_ptr(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ferry_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ferry_easy_setopt_write_cb(CURL *h, size_t (*cb)(char *, size_t, size_t, void *)) { return curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, cb); }
static inline CURLcode ferry_easy_setopt_header_cb(CURL *h, size_t (*cb)(char *, size_t, size_t, void *)) { return curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, cb); }
static inline CURLcode ferry_easy_setopt_read_cb(CURL *h, size_t (*cb)(char *, size_t, size_t, void *)) { return curl_easy_setopt(h, CURLOPT_READFUNCTION, cb); }
static inline CURLcode ferry_easy_setopt_seek_cb(CURL *h, int (*cb)(void *, curl_off_t, int)) { return curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, cb); }
static inline CURLcode ferry_easy_setopt_share(CURL *h, CURLSH *s) { return curl_easy_setopt(h, CURLOPT_SHARE, s); }
static inline CURLSHcode ferry_share_setopt_long(CURLSH *s, CURLSHoption o, long v) { return curl_share_setopt(s, o, v); }
static inline CURLcode ferry_easy_setopt_xferinfo_cb(CURL *h, int (*cb)(void *, curl_off_t, curl_off_t, curl_off_t, curl_off_t)) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, cb); }

static inline CURLcode ferry_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ferry_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ferry_easy_getinfo_string(CURL *h, CURLINFO i, char **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ferry_easy_getinfo_ptr(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ferry_easy_getinfo_slist(CURL *h, CURLINFO i, struct curl_slist **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ferry_easy_getinfo_double(CURL *h, CURLINFO i, double *v) { return curl_easy_getinfo(h, i, v); }

static inline CURLMcode ferry_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }

/* CURLMSG_DONE carries its result in a union. */
static inline CURLcode ferry_msg_result(CURLMsg *m) { return m->data.result; }

/* libcurl (with libidn2) reads a non-ASCII host name in the encoding of the C
   library's LC_CTYPE: in the "C" locale a daemon starts in, every such name fails
   (as "A memory function failed"). The engine thread reads them as UTF-8, as D-Bus
   strings are: its own locale, C.UTF-8, for that thread only (the process's stays).
   Without C.UTF-8 on the system, such hosts fail, in the check below too. */
static inline void ferry_use_utf8_ctype(void) {
    locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (utf8) uselocale(utf8); /* kept for the thread's life */
}

static inline int ferry_has_non_ascii(const char *s) {
    for (; *s; s++) if ((unsigned char)*s >= 0x80) return 1;
    return 0;
}

/* CURLUE_BAD_HOSTNAME when `u`'s host is not ASCII and has no IDNA (punycode) form
   that libcurl can make from it as UTF-8, as the engine thread would. */
static inline CURLUcode ferry_idn_check(CURLU *u) {
    char *host = NULL;
    CURLUcode rc = CURLUE_OK;
    if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host) return CURLUE_OK;
    if (ferry_has_non_ascii(host)) {
        locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
        locale_t before = utf8 ? uselocale(utf8) : (locale_t)0;
        char *ace = NULL;
        if (curl_url_get(u, CURLUPART_HOST, &ace, CURLU_PUNYCODE) != CURLUE_OK) rc = CURLUE_BAD_HOSTNAME;
        curl_free(ace);
        if (utf8) { uselocale(before); freelocale(utf8); }
    }
    curl_free(host);
    return rc;
}

/* libcurl's own parse of a request URL, as a transfer's would go (scheme given, any
   scheme parsed), its refusal of a user name or password holding %00 (which it
   makes when it decodes them for the request), and of a non-ASCII host name without
   an IDNA form (above). CURLUE_OK when libcurl can use it. */
static inline CURLUcode ferry_url_check(const char *url) {
    CURLU *u = curl_url();
    if (!u) return CURLUE_OUT_OF_MEMORY;
    CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME);
    if (rc == CURLUE_OK) rc = ferry_idn_check(u);
    CURLUPart parts[2] = { CURLUPART_USER, CURLUPART_PASSWORD };
    for (int i = 0; i < 2 && rc == CURLUE_OK; i++) {
        char *part = NULL;
        if (curl_url_get(u, parts[i], &part, 0) == CURLUE_OK && part) {
            if (strstr(part, "%00")) rc = CURLUE_URLDECODE;
            curl_free(part);
        }
    }
    curl_url_cleanup(u);
    return rc;
}

/* Whether a request went out on an HTTP/2 connection, known before any answer comes:
   libcurl 7.88 reports the HTTP version of a response only (CURLINFO_HTTP_VERSION is 0
   for a request whose connection died unanswered). Its pre-request callback runs once
   the connection is up, before each request is sent (redirects included); there the
   TLS session says what ALPN chose. OpenSSL's SSL_get0_alpn_selected is looked up in
   the process (libcurl loaded libssl): no OpenSSL headers or link. With another TLS
   backend, or over plain http (never multiplexed by Ferry), it stays 0 (not known). */
struct ferry_alpn_probe {
    CURL *easy;
    int http2;
};

static inline int ferry_connection_negotiated_h2(CURL *h) {
    struct curl_tlssessioninfo *info = NULL;
    if (curl_easy_getinfo(h, CURLINFO_TLS_SSL_PTR, &info) != CURLE_OK || info == NULL
        || info->backend != CURLSSLBACKEND_OPENSSL || info->internals == NULL) return 0;
    /* Looked up once (only the engine's thread calls this); NULL without libssl. */
    typedef void (*selected_fn)(const void *, const unsigned char **, unsigned int *);
    static selected_fn selected = NULL;
    static int looked_up = 0;
    if (!looked_up) {
        selected = (selected_fn)dlsym(RTLD_DEFAULT, "SSL_get0_alpn_selected");
        looked_up = 1;
    }
    if (selected == NULL) return 0;
    const unsigned char *protocol = NULL;
    unsigned int length = 0;
    selected(info->internals, &protocol, &length);
    return length == 2 && protocol != NULL && memcmp(protocol, "h2", 2) == 0;
}

static inline int ferry_alpn_prereq(void *probe, char *primary_ip, char *local_ip, int primary_port, int local_port) {
    (void)primary_ip; (void)local_ip; (void)primary_port; (void)local_port;
    struct ferry_alpn_probe *p = probe;
    p->http2 = ferry_connection_negotiated_h2(p->easy);
    return CURL_PREREQFUNC_OK;
}

/* Whether the probe can tell at all: libcurl's TLS is OpenSSL and the process has
   SSL_get0_alpn_selected. After curl_global_init (curl_version_info is not thread-safe
   before it); looks the symbol up itself. */
static inline int ferry_alpn_probe_works(void) {
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    if (v == NULL || v->ssl_version == NULL || strncmp(v->ssl_version, "OpenSSL/", 8) != 0) return 0;
    return dlsym(RTLD_DEFAULT, "SSL_get0_alpn_selected") != NULL;
}

/* `probe` must outlive the handle's requests (its owner cleans the handle up first). */
static inline CURLcode ferry_easy_probe_alpn(CURL *h, struct ferry_alpn_probe *probe) {
    probe->easy = h;
    probe->http2 = 0;
    CURLcode rc = curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, ferry_alpn_prereq);
    return rc == CURLE_OK ? curl_easy_setopt(h, CURLOPT_PREREQDATA, (void *)probe) : rc;
}

/* The engine's socket callbacks (`ConnectionSockets`): every socket of a handle's
   connections is opened and closed through them. A connection keeps the callbacks and
   `registry` of the handle that made it, so `registry` must outlive the multi's
   connections (the engine loop keeps it until after curl_multi_cleanup). */
static inline CURLcode ferry_easy_track_sockets(CURL *h, curl_opensocket_callback opened,
                                                curl_closesocket_callback closing, void *registry) {
    CURLcode rc = curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, opened);
    if (rc == CURLE_OK) rc = curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, registry);
    if (rc == CURLE_OK) rc = curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, closing);
    if (rc == CURLE_OK) rc = curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, registry);
    return rc;
}

/* curl_global_init's flag macros combine other macros; spell the default here. */
static inline CURLcode ferry_global_init(void) { return curl_global_init(CURL_GLOBAL_DEFAULT); }

/* Not curl, but FerryEngine's only C module: glibc declares sync_file_range only
   under _GNU_SOURCE, which Swift's Glibc module is not built with. Same prototype as
   glibc's. Starts write-out of a finished region of a part file (SYNC_FILE_RANGE_WRITE). */
extern int sync_file_range(int __fd, __off64_t __offset, __off64_t __count, unsigned int __flags);
static inline int ferry_start_writeback(int fd, long long offset, long long count) {
    return sync_file_range(fd, (__off64_t)offset, (__off64_t)count, 2 /* SYNC_FILE_RANGE_WRITE */);
}

#endif
