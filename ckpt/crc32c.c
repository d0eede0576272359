/*
 * CRC32C for checkpoint files (ckpt.h): slicing-by-8 in software, SSE4.2's
 * crc32 instruction when the CPU has it; both give the same value.
 */
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint32_t crc_table[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

/* Slicing-by-8 (Kounavis and Berry 2008) on the raw (pre/post-inverted) register. */
static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
            crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p,
                                                         size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#define HAVE_CRC_HW 1
#endif

uint32_t dp_ckpt_crc32c(uint32_t crc, const void *buf, size_t n)
{
    static int mode; /* 0 unknown, 1 software, 2 hardware */
    if (!mode) {
        crc_init();
        mode = 1;
#ifdef HAVE_CRC_HW
        __builtin_cpu_init();
        if (__builtin_cpu_supports("sse4.2"))
            mode = 2;
#endif
    }
    uint32_t c = ~crc;
#ifdef HAVE_CRC_HW
    if (mode == 2)
        return ~crc_hw(c, buf, n);
#endif
    return ~crc_sw(c, buf, n);
}

int dp_ckpt_file_crc32c(const char *path, uint32_t *crc, int64_t *size, struct dp_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dp_err_set(err, errno == ENOENT ? DP_ENOENT : DP_EIO, "%s: cannot open: %s", path,
                          strerror(errno));
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    uint32_t c = 0;
    int64_t total = 0;
    int rc = 0;
    for (;;) {
        ssize_t k = read(fd, buf, CHUNK);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = dp_err_set(err, DP_EIO, "%s: read failed: %s", path, strerror(errno));
            break;
        }
        if (k == 0)
            break;
        c = dp_ckpt_crc32c(c, buf, (size_t)k);
        total += k;
    }
    free(buf);
    close(fd);
    if (!rc) {
        *crc = c;
        *size = total;
    }
    return rc;
}
