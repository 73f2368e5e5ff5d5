-- The submitter reports what it sees of the ledger's nodes (dlt.url) into
-- its instance row, for `queuer status` and the view queuer.ledger_nodes:
-- when a node changes state, and every few seconds. $1 instance; then one
-- array element per node, in dlt.url order: $2 urls, $3 states (up,
-- suspect, down), $4 latency moving averages in us (0 = not measured), $5
-- POSTs in flight, $6 POSTs started, $7 status reads started, $8 failed
-- requests, $9 times it turned suspect, $10 batches its congestion window
-- allows, $11 batches the worker has at it (posted, not yet final).
UPDATE queuer.instances
   SET ledger_nodes_at = now(),
       ledger_nodes = (
           SELECT jsonb_agg(jsonb_build_object(
                      'node', n.ord - 1, 'url', n.url, 'state', n.state,
                      'latency_ms', round(nullif(n.latency_us, 0) / 1000.0, 3),
                      'posts_in_flight', n.in_flight, 'posts', n.posts, 'polls', n.polls,
                      'failures', n.failures, 'suspect', n.suspect,
                      'window', n.win, 'window_used', n.win_used)
                      ORDER BY n.ord)
             FROM unnest($2::text[], $3::text[], $4::bigint[], $5::integer[], $6::bigint[],
                         $7::bigint[], $8::bigint[], $9::bigint[], $10::integer[],
                         $11::integer[]) WITH ORDINALITY
                  AS n(url, state, latency_us, in_flight, posts, polls, failures, suspect, win,
                       win_used, ord))
 WHERE instance_id = $1
