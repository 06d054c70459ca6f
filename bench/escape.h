/*
 * escape.h — writing a string into the bench tools' JSON and SVG output, escaped. Every string
 * that comes from outside the program (a trace's file name, a command line, a backend's or the
 * device's name, an error message) goes through one of these two, so a name like `we"ird` or
 * `a<b&c` cannot break the document.
 *
 * Both take any bytes: valid UTF-8 passes through, anything that is not (a stray byte of a
 * Latin-1 file name) becomes U+FFFD, so the output is always valid UTF-8. No state; thread-safe
 * as stdio is.
 */
#ifndef VPMM_BENCH_ESCAPE_H
#define VPMM_BENCH_ESCAPE_H

#include <stdio.h>

/* Writes s as a JSON string literal, quotes included (`null` when s is NULL): `"` and `\` are
 * backslash-escaped, control characters written as \n, \t, ... or \u00XX. */
void esc_json_string(FILE *f, const char *s);

/* Writes s as XML character data, fit for element text and for attribute values in either kind
 * of quotes: & < > " ' become entities; control characters XML 1.0 forbids become U+FFFD. */
void esc_xml_text(FILE *f, const char *s);

#endif /* VPMM_BENCH_ESCAPE_H */
