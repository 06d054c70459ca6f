/*
 * version.c — vpmm_version(): the library's version as a string, made from the VPMM_VERSION_*
 * macros of include/vpmm.h when the library is compiled (the header is the one place the version
 * is written; CMake's project(VERSION) reads it from there). Constant data: thread-safe.
 */
#include "vpmm.h"

#define VPMM_STR_(x) #x
#define VPMM_STR(x)  VPMM_STR_(x)

const char *vpmm_version(void)
{
    return VPMM_STR(VPMM_VERSION_MAJOR) "." VPMM_STR(VPMM_VERSION_MINOR) "." VPMM_STR(
        VPMM_VERSION_PATCH);
}
