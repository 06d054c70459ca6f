/*
 * api.h — the API floor: the public entry points that pick a backend or a layer and call down
 * (create.c: the backend factory). Nothing below src/api/ includes this header.
 */
#ifndef VPMM_API_H
#define VPMM_API_H

#include "pool.h"

#endif /* VPMM_API_H */
