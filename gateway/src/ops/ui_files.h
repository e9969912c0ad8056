/*
 * The status page's files, built into the binary from gateway/ui/ (embed.cmake writes
 * ui_files.c at build time). ui.c serves them.
 */
#ifndef GATEWAY_UI_FILES_H
#define GATEWAY_UI_FILES_H

#include <stddef.h>

typedef struct gw_ui_file {
    const char *name;            /* "index.html" */
    const char *type;            /* its Content-Type */
    const unsigned char *bytes;
    size_t len;
} gw_ui_file;

/* Every file, ended by an entry whose name is NULL. */
extern const gw_ui_file gw__ui_files[];

#endif
