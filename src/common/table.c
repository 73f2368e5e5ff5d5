/* Plain-text tables for CLI output; see table.h. */
#include "common/table.h"
#include "common/err.h"
#include "common/termtext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *at(const struct qw_table *t, size_t row, int col)
{
    return t->cells + (row * (size_t)t->cols + (size_t)col) * QW_TABLE_CELL_MAX;
}

int qw_table_init(struct qw_table *t, size_t rows, int cols)
{
    t->rows = rows;
    t->cols = cols;
    t->cells = calloc(rows * (size_t)cols, QW_TABLE_CELL_MAX);
    return t->cells || rows == 0 ? QW_OK : QW_ERR_NOMEM;
}

void qw_table_set(struct qw_table *t, size_t row, int col, const char *text)
{
    char *dst = at(t, row, col);
    /* one byte more than a cell: tells whether the escaped text was cut */
    char cell[QW_TABLE_CELL_MAX + 1];
    size_t n = qw_termtext_escape(cell, sizeof(cell), text);
    if (n < QW_TABLE_CELL_MAX) {
        memcpy(dst, cell, n + 1);
        return;
    }
    n = qw_termtext_escape(dst, QW_TABLE_CELL_MAX - 3, text);
    memcpy(dst + n, "...", 4);
}

void qw_table_set_int(struct qw_table *t, size_t row, int col, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", (long long)v);
    qw_table_set(t, row, col, buf);
}

void qw_table_render(const struct qw_table *t, struct qw_strbuf *b)
{
    size_t *width = calloc((size_t)t->cols + 1, sizeof(*width));
    if (!width) {
        b->failed = true;
        return;
    }
    for (size_t r = 0; r < t->rows; r++)
        for (int c = 0; c < t->cols; c++) {
            size_t n = strlen(at(t, r, c));
            if (n > width[c])
                width[c] = n;
        }
    for (size_t r = 0; r < t->rows; r++) {
        for (int c = 0; c < t->cols; c++) {
            if (c == t->cols - 1)
                qw_strbuf_printf(b, "  %s", at(t, r, c));
            else
                qw_strbuf_printf(b, "  %-*s", (int)width[c], at(t, r, c));
        }
        while (!b->failed && b->len > 0 && b->data[b->len - 1] == ' ')
            b->data[--b->len] = '\0';
        qw_strbuf_printf(b, "\n");
    }
    free(width);
}

void qw_table_free(struct qw_table *t)
{
    free(t->cells);
    t->cells = NULL;
    t->rows = 0;
}
