/*
 * An hwloc XML file from elsewhere, made safe to hand to hwloc: a textual
 * precheck with our own one-line messages, then hwloc's import of the file
 * in a child process, which sends back hwloc's own export of what it read.
 * hwloc.c loads only that export.
 *
 * Why a child: hwloc's XML importer trusts its input. An object without its
 * complete_cpuset attribute, for instance, makes hwloc 2.9.0 dereference NULL
 * while it sorts the object among its siblings (hwloc_bitmap_compare_first
 * under hwloc_topology_load), and other missing or inconsistent attributes
 * crash or abort it elsewhere (tests/topology/xml/crash-l3-no-complete-cpuset.xml
 * is one such file). Validating the file ourselves would mean knowing every
 * attribute each hwloc version dereferences; a child that dies costs nothing
 * but an error message. What comes back is an export of a topology hwloc built
 * and accepted, the form `lstopo --of xml` writes and hwloc reads back.
 *
 * It does not look at the topology's content (hwloc.c does).
 */
#include "internal.h"

#include <errno.h>
#include <hwloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * A child that has not finished by then is stuck: a real export, even of a
 * machine with thousands of PUs, loads in well under a second. Some mangled
 * files keep hwloc busy for many seconds before it gives up (seen while
 * fuzzing), so $DPLAN_XML_LOAD_TIMEOUT_S (1-3600) may shorten the wait;
 * tests/fuzz/fuzz_topo_xml.c sets 1.
 */
#define LOAD_TIMEOUT_S 30

static unsigned load_timeout_s(void)
{
    const char *e = getenv("DPLAN_XML_LOAD_TIMEOUT_S");
    long v = e && e[0] ? strtol(e, NULL, 10) : 0;
    return v >= 1 && v <= 3600 ? (unsigned)v : LOAD_TIMEOUT_S;
}

/* Child exit statuses. */
enum { CHILD_OK = 0, CHILD_EINIT = 3, CHILD_EREAD = 4, CHILD_EEXPORT = 5, CHILD_EWRITE = 6 };

int dp__topo_xml_precheck(const char *file, const char *buf, struct dp_err *err)
{
    const char *top = strstr(buf, "<topology");
    if (!top)
        return dp_err_set(err, DP_EINVAL,
                          "%s: not an hwloc XML topology (no <topology> element; export one "
                          "with `lstopo --of xml FILE.xml`)",
                          file);
    const char *end = strchr(top, '>');
    const char *ver = strstr(top, "version=\"");
    if (ver && end && ver < end) {
        int major = atoi(ver + 9), minor = 0;
        const char *dot = strchr(ver + 9, '.');
        if (dot && dot < end)
            minor = atoi(dot + 1);
        if (major > 2)
            return dp_err_set(err, DP_EINVAL,
                              "%s: hwloc XML version %d.%d is newer than the hwloc 2.x dplan uses "
                              "can read; export it again with hwloc 2.x, or with hwloc 3's "
                              "`lstopo --export-xml-flags v2`",
                              file, major, minor);
    }
    if (!strstr(top, "</topology>"))
        return dp_err_set(err, DP_EINVAL,
                          "%s: truncated hwloc XML topology (no closing </topology>)", file);
    return 0;
}

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* In the child: import, export, write the export to fd, _exit. Never returns. */
static void child(const char *buf, size_t len, int fd, unsigned timeout_s)
{
    /*
     * Die by the signal itself. A sanitizer or libFuzzer in this process
     * installed handlers that would report the child's crash as its own.
     */
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        signal(fatal[i], SIG_DFL);
    signal(SIGALRM, SIG_DFL);
    alarm(timeout_s);
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        _exit(CHILD_EINIT);
    /* Keep every I/O object the file has: bridges give the PCIe paths. */
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (hwloc_topology_set_xmlbuffer(topo, buf, (int)len) != 0 || hwloc_topology_load(topo) != 0)
        _exit(CHILD_EREAD);
    char *out = NULL;
    int out_len = 0;
    if (hwloc_topology_export_xmlbuffer(topo, &out, &out_len, 0) != 0 || out_len < 1)
        _exit(CHILD_EEXPORT);
    /* out_len counts the final NUL, which the parent needs too. */
    _exit(write_all(fd, out, (size_t)out_len) ? CHILD_OK : CHILD_EWRITE);
}

/* Read fd to its end into a growing buffer; false on ENOMEM or a read error. */
static bool read_all(int fd, char **out, size_t *out_len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b)
        return false;
    for (;;) {
        if (n == cap) {
            char *nb = cap < ((size_t)1 << 30) ? realloc(b, cap * 2) : NULL;
            if (!nb) {
                free(b);
                return false;
            }
            b = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(b);
            return false;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *out = b;
    *out_len = n;
    return true;
}

int dp__topo_xml_isolate(const char *file, const char *buf, size_t len, char **out, size_t *out_len,
                         struct dp_err *err)
{
    *out = NULL;
    *out_len = 0;
    int fds[2];
    if (pipe(fds) != 0)
        return dp_err_set(err, DP_EIO, "%s: cannot create a pipe to load it: %s", file,
                          strerror(errno));
    unsigned timeout_s = load_timeout_s();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return dp_err_set(err, DP_EIO, "%s: cannot start a process to load it: %s", file,
                          strerror(e));
    }
    if (pid == 0) {
        close(fds[0]);
        child(buf, len, fds[1], timeout_s);
    }
    close(fds[1]);
    char *got = NULL;
    size_t got_len = 0;
    bool read_ok = read_all(fds[0], &got, &got_len);
    close(fds[0]); /* a child still writing gets SIGPIPE */
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
        ;
    int rc = 0;
    if (w < 0)
        rc = dp_err_set(err, DP_EIO, "%s: lost the process loading it: %s", file, strerror(errno));
    else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        rc = dp_err_set(err, DP_EINVAL,
                        "%s: hwloc could not read it (its loader did not finish in %u s)", file,
                        timeout_s);
    else if (WIFSIGNALED(status))
        rc = dp_err_set(err, DP_EINVAL, "%s: hwloc could not read it (its loader crashed)", file);
    else if (!read_ok)
        rc = dp_err_set(err, DP_ENOMEM, "%s: out of memory reading hwloc's export of it", file);
    else if (WEXITSTATUS(status) == CHILD_EREAD)
        rc = dp_err_set(err, DP_EINVAL,
                        "%s: hwloc cannot read this XML topology (malformed or truncated)", file);
    else if (WEXITSTATUS(status) != CHILD_OK || got_len == 0 || got[got_len - 1] != '\0')
        rc = dp_err_set(err, DP_EIO, "%s: hwloc could not read it (its loader failed, status %d)",
                        file, WEXITSTATUS(status));
    if (rc) {
        free(got);
        return rc;
    }
    *out = got;
    *out_len = got_len;
    return 0;
}
