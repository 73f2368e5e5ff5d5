-- The wake-up self-test (src/queuer/notify_check.h): a NOTIFY to the
-- worker's own channel, sent through its main connection, that must come
-- back on the connection it LISTENs on. $1 the channel (queuer_i<incarnation>),
-- $2 the payload ("!selftest:<n>", never a "<service>:<epoch>" item).
SELECT pg_notify($1, $2)
