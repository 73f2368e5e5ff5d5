-- 0022: the view queuer.ledger_nodes shows each node's congestion window,
-- as workers report it in their instance row (window: the batches the
-- worker lets be at the node at once; window_used: how many are), so that
-- `queuer status` reads it through the view, as operators may, and not
-- from queuer.instances, which they may not read.

CREATE OR REPLACE VIEW queuer.ledger_nodes AS
    SELECT i.instance_id, n.node, n.url, n.state, n.latency_ms, n.posts_in_flight, n.posts,
           n.polls, n.failures, n.suspect, i.ledger_nodes_at AS reported_at,
           n."window" AS window_limit, n.window_used
      FROM queuer.instances i
     CROSS JOIN LATERAL jsonb_to_recordset(coalesce(i.ledger_nodes, '[]'::jsonb))
           AS n(node integer, url text, state text, latency_ms numeric, posts_in_flight integer,
                posts bigint, polls bigint, failures bigint, suspect bigint, "window" bigint,
                window_used bigint)
     WHERE i.stopped_at IS NULL;
COMMENT ON VIEW queuer.ledger_nodes IS
    'Each running worker''s view of each ledger node (dlt.url): state up (in use), suspect '
    '(failing: probed, no requests) or down (probes keep failing), latency (moving average '
    'of answered requests, ms), POSTs in flight (channels in use, at most dlt.channels), '
    'requests started and failed, times it turned suspect, its congestion window (the '
    'batches the worker lets be at the node at once, NULL when not reported) and how many '
    'are; reported_at = when it was written.';
