-- queuer status: each live worker's view of the ledger nodes
-- (queuer.ledger_nodes), at most $1 rows. Columns: instance_id, node, url,
-- state, latency in us (-1 = not measured), POSTs in flight, POSTs,
-- failures, seconds since the worker reported it, the node's congestion
-- window and the batches the worker has at the node (-1 = not reported).
SELECT n.instance_id, n.node, n.url, n.state,
       coalesce(round(n.latency_ms * 1000), -1)::bigint,
       n.posts_in_flight, n.posts, n.failures,
       floor(extract(epoch FROM now() - n.reported_at))::bigint,
       coalesce(n.window_limit, -1), coalesce(n.window_used, -1)
  FROM queuer.ledger_nodes n
  JOIN queuer.instance_overview i USING (instance_id)
 WHERE i.state = 'alive'
 ORDER BY n.instance_id, n.node
 LIMIT $1::integer
