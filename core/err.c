/*
 * Error records: the first error wins, later ones are ignored, so that a
 * low-level reader's precise message is what the user sees.
 */
#include "core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Messages are one line: control characters from user input (a JSON key with a
 * newline, say) are shown as '?'. */
static void one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

int dp_err_set(struct dp_err *err, int code, const char *fmt, ...)
{
    if (!err || err->code)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    one_line(err->msg);
    return code;
}

void dp_err_prefix(struct dp_err *err, const char *fmt, ...)
{
    if (!err || !err->code)
        return;
    char pre[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    char tmp[sizeof err->msg];
    snprintf(tmp, sizeof tmp, "%s: %s", pre, err->msg);
    memcpy(err->msg, tmp, sizeof tmp);
    one_line(err->msg);
}

void dp_err_clear(struct dp_err *err)
{
    err->code = 0;
    err->msg[0] = '\0';
}

int dp_status_exit_code(int status)
{
    if (status == 0)
        return 0;
    return status == DP_EUSAGE ? 2 : 1;
}
