/*
 * ipc_wire.h — the bytes of a vpmm IPC handle (vpmm_ipc_export writes them, vpmm_ipc_open reads
 * them): what another process needs to map an allocation of this one. Host byte order: exporter
 * and importer run on one machine.
 *
 *   header (64 bytes)                                 then nphys entries (32 bytes each)
 *   magic "vpmmIPC1" | version | nphys | pid |        fd | pad | serial | size | offset
 *   table_fd | nonce | offset | size | slot | gen |
 *   device | reserved
 *
 * The entries are the physical handles that hold the allocation, in address order from the page
 * its first byte is on: each one's descriptor number in the exporter (taken with pidfd_getfd), a
 * serial number unique in the exporting pool (with pid and nonce, the importer's cache key: the
 * same pages opened twice are mapped once), its size, and where its bytes start in what the
 * descriptor names (0 on CUDA). offset is where the allocation starts from the first handle's
 * start, size its (rounded) size. table_fd, slot and gen name the share count (share_table.c).
 */
#ifndef VPMM_IPC_WIRE_H
#define VPMM_IPC_WIRE_H

#include <stdint.h>

#define VPMM_IPC_MAGIC   "vpmmIPC1"
#define VPMM_IPC_VERSION 1u

typedef struct vpmm_ipc_header {
    char magic[8];
    uint32_t version;
    uint32_t nphys;
    int32_t pid;
    int32_t table_fd;
    uint64_t nonce;
    uint64_t offset;
    uint64_t size;
    uint32_t slot, gen;
    int32_t device;
    uint32_t reserved;
} vpmm_ipc_header_t;

typedef struct vpmm_ipc_entry {
    int32_t fd;
    uint32_t reserved;
    uint64_t serial;
    uint64_t size;
    uint64_t offset;
} vpmm_ipc_entry_t;

_Static_assert(sizeof(vpmm_ipc_header_t) == 64, "the wire header is 64 bytes");
_Static_assert(sizeof(vpmm_ipc_entry_t) == 32, "a wire entry is 32 bytes");

#endif /* VPMM_IPC_WIRE_H */
