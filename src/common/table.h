/*
 * Plain-text tables for CLI output: a header row and data rows, each
 * column padded to its widest cell, two spaces of indent. Pure.
 */
#ifndef QW_COMMON_TABLE_H
#define QW_COMMON_TABLE_H

#include "common/err.h"
#include "common/strbuf.h"

#include <stddef.h>
#include <stdint.h>

#define QW_TABLE_CELL_MAX 160 /* bytes per cell; longer text ends in "..." */

struct qw_table {
    int cols;    /* columns per row */
    size_t rows; /* rows including the header */
    char *cells; /* rows * cols cells of QW_TABLE_CELL_MAX bytes */
};

/** Allocates an empty table; returns QW_OK or QW_ERR_NOMEM. Free with qw_table_free(). */
QW_MUST_CHECK int qw_table_init(struct qw_table *t, size_t rows, int cols);

/**
 * Sets a cell: copied with control characters written out
 * (qw_termtext_escape: stored text cannot drive the terminal or forge a
 * row), cut to QW_TABLE_CELL_MAX - 1 bytes with "...".
 */
void qw_table_set(struct qw_table *t, size_t row, int col, const char *text);

/** Sets a cell to a decimal integer. */
void qw_table_set_int(struct qw_table *t, size_t row, int col, int64_t v);

/** Appends the table to `b`: two spaces before each column, the last one not padded, trailing
 * blanks trimmed. */
void qw_table_render(const struct qw_table *t, struct qw_strbuf *b);

/** Releases the cells. */
void qw_table_free(struct qw_table *t);

#endif
