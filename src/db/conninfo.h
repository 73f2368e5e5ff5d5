/*
 * Connection-string checks, done by libpq's own parser (PQconninfoParse), so
 * every spelling libpq accepts is seen as libpq sees it: percent-encoded URI
 * parameter names (`?pass%77ord=`), user:password@ in a URI, any whitespace
 * around `=`. Pure: nothing is connected, nothing is logged.
 */
#ifndef QW_DB_CONNINFO_H
#define QW_DB_CONNINFO_H

/**
 * Checks `conninfo` (keywords or a postgresql:// URI; "" is libpq's
 * defaults). Returns NULL when it is acceptable, else a static reason
 * ("must not contain a password; ..." for any option libpq treats as a
 * password, such as password and sslpassword; "is not a valid libpq
 * connection string ..." when libpq cannot parse it). The reason never
 * quotes the string, which may hold a secret. Thread-safe.
 */
const char *qw_db_conninfo_check(const char *conninfo);

#endif
