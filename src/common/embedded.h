/* Text files compiled into the binary: migrations and runtime SQL. */
#ifndef QW_COMMON_EMBEDDED_H
#define QW_COMMON_EMBEDDED_H

/** One embedded file: `name` is its basename without extension. Static data. */
struct qw_embedded {
    const char *name; /* e.g. "0001_schema" or "claims_renew" */
    const char *text; /* whole file, NUL-terminated */
};

/** Migrations in ascending order; the table ends with a {NULL, NULL} entry. */
extern const struct qw_embedded qw_migrations[];
/** Runtime statements sorted by name; ends with a {NULL, NULL} entry. */
extern const struct qw_embedded qw_statements[];

/** Finds an embedded statement by name; NULL when there is none. */
const char *qw_statement_text(const char *name);

#endif
