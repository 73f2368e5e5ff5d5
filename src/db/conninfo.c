/* Connection-string checks by libpq's own parser; see conninfo.h. */
#include "db/conninfo.h"

#include <libpq-fe.h>

#include <string.h>

const char *qw_db_conninfo_check(const char *conninfo)
{
    char *errmsg = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &errmsg);
    if (!opts) {
        /* libpq's message may quote a token of the string, which may be the password */
        if (!errmsg)
            return "could not be checked (out of memory)";
        PQfreemem(errmsg);
        return "is not a valid libpq connection string (key=value pairs or a postgresql:// URI)";
    }
    const char *why = NULL;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        /* dispchar "*" marks the options libpq itself hides: password, sslpassword */
        if (o->val && o->dispchar && strcmp(o->dispchar, "*") == 0) {
            why = "must not contain a password; use QUEUER_DATABASE_PASSWORD or "
                  "database.password_file";
            explicit_bzero(o->val, strlen(o->val));
        }
    }
    PQconninfoFree(opts);
    return why;
}
