/* Exporter encodings: CRC-32C and its TFRecord mask, Event framing, the
 * --prometheus address grammar. */
#include <stdint.h>
#include <string.h>

#include "record/exporter.h"
#include "record/tfevents.h"
#include "trainperf.h"
#include "tt.h"

TT_TEST(crc32c_vector)
{
    /* The check value of CRC-32C, and its mask as TFRecord stores it. */
    TT_ASSERT(tfev_crc32c("123456789", 9) == 0xE3069283u);
    TT_ASSERT(tfev_masked_crc("123456789", 9) == 0xC78AB0E5u);
    TT_ASSERT(tfev_crc32c("", 0) == 0);
}

TT_TEST(event_framing)
{
    buf b;
    buf_init(&b, 1 << 16);
    tfev_value v[2] = {{"a/b", 1.5, NULL}, {"t", 0, "hello"}};
    TT_EQ_INT(tfev_event(&b, 1700000000.25, 42, NULL, v, 2), 0);
    TT_ASSERT(b.len > 16);
    const unsigned char *p = (const unsigned char *)b.data;
    uint64_t len = 0;
    for (int i = 0; i < 8; i++) len |= (uint64_t)p[i] << (8 * i);
    TT_ASSERT(len + 16 == b.len);
    uint32_t c = 0;
    for (int i = 0; i < 4; i++) c |= (uint32_t)p[8 + i] << (8 * i);
    TT_ASSERT(c == tfev_masked_crc(p, 8));
    for (int i = 0; i < 4; i++) c = (c & ~(0xFFu << (8 * i))) | (uint32_t)p[12 + len + i] << (8 * i);
    TT_ASSERT(c == tfev_masked_crc(p + 12, len));
    /* Event: wall_time (tag 0x09, 8 bytes), then step (0x10, varint 42). */
    TT_ASSERT(p[12] == 0x09);
    TT_ASSERT(p[21] == 0x10 && p[22] == 42);
    buf_free(&b);
}

TT_TEST(event_too_big)
{
    static char big[70000];
    memset(big, 'x', sizeof(big) - 1);
    buf b;
    buf_init(&b, 1 << 20);
    tfev_value v = {big, 1, NULL};
    TT_ASSERT(tfev_event(&b, 1, 1, NULL, &v, 1) == TPF_ETOOBIG);
    buf_free(&b);
}

TT_TEST(prom_addr)
{
    char host[256], err[128];
    int port = -1;
    TT_EQ_INT(prom_parse_addr("9400", host, sizeof(host), &port, err, sizeof(err)), 0);
    TT_EQ_STR(host, "127.0.0.1");
    TT_EQ_INT(port, 9400);
    TT_EQ_INT(prom_parse_addr("0.0.0.0:0", host, sizeof(host), &port, err, sizeof(err)), 0);
    TT_EQ_STR(host, "0.0.0.0");
    TT_EQ_INT(port, 0);
    TT_EQ_INT(prom_parse_addr("[::1]:80", host, sizeof(host), &port, err, sizeof(err)), 0);
    TT_EQ_STR(host, "::1");
    TT_ASSERT(prom_parse_addr("", host, sizeof(host), &port, err, sizeof(err)) == TPF_EINVAL);
    TT_ASSERT(prom_parse_addr("host:", host, sizeof(host), &port, err, sizeof(err)) == TPF_EINVAL);
    TT_ASSERT(prom_parse_addr("65536", host, sizeof(host), &port, err, sizeof(err)) == TPF_EINVAL);
    TT_ASSERT(prom_parse_addr("::1:80", host, sizeof(host), &port, err, sizeof(err)) == TPF_EINVAL);
    TT_ASSERT(prom_parse_addr("x:12ab", host, sizeof(host), &port, err, sizeof(err)) == TPF_EINVAL);
    TT_ASSERT(strstr(err, "12ab") != NULL);
}

int main(int argc, char **argv) { return tt_main(argc, argv); }
