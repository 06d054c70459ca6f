/*
 * escape.c — the JSON and XML escaping of escape.h. Both walk the string one UTF-8 sequence at a
 * time: a valid sequence (no overlong form, no surrogate, nothing above U+10FFFF) is copied, any
 * other byte is replaced by U+FFFD and the walk goes on at the next byte.
 */
#include <stddef.h>
#include <stdint.h>

#include "escape.h"

/* The length of the valid UTF-8 sequence that starts at s (1 to 4), or 0 if none does. The
 * string's terminating NUL is never a continuation byte, so the walk stops at it. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n;
    uint32_t cp;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        n = 2;
    else if ((s[0] & 0xf0) == 0xe0)
        n = 3;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        n = 4;
    else
        return 0; /* a continuation byte, an overlong lead (0xc0, 0xc1) or beyond U+10FFFF */
    cp = s[0] & (0x7fu >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

void esc_json_string(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    if (s == NULL) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    while (*p != '\0') {
        size_t n = utf8_len(p);
        if (n == 0) {
            fputs("\\ufffd", f);
            p++;
            continue;
        }
        if (n > 1) {
            fwrite(p, 1, n, f);
            p += n;
            continue;
        }
        switch (*p) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        case '\b':
            fputs("\\b", f);
            break;
        case '\f':
            fputs("\\f", f);
            break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
        p++;
    }
    fputc('"', f);
}

void esc_xml_text(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (p != NULL && *p != '\0') {
        size_t n = utf8_len(p);
        if (n == 0 || (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')) {
            fputs("&#xfffd;", f);
            p++;
            continue;
        }
        if (n > 1) {
            fwrite(p, 1, n, f);
            p += n;
            continue;
        }
        switch (*p) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&#39;", f);
            break;
        default:
            fputc(*p, f);
        }
        p++;
    }
}
