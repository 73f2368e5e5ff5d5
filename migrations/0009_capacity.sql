-- 0009: shared ledger capacity.
--
-- An operator states what a ledger can take (queuer.capacity_set(), or
-- `queuer capacity set`): at most max_in_flight cost units in flight and/or
-- per_second cost units a second. The capacity is cut into partitions of
-- partition_size units (of max_in_flight when it is set, else of
-- per_second; the rate is spread over the partitions in proportion when
-- both are set). A worker may use a partition's capacity only while it
-- holds the partition's lease (holder, epoch, expiry, as service claims
-- have); each live worker also reserves reserved_per_instance units as
-- whole partitions it keeps while it lives. Workers publish their target
-- (the cost of the work they have waiting) in capacity_instances and take
-- free partitions only while their target exceeds what they hold; see
-- src/worker/capacity_lease.c and docs/OPERATIONS.md.
--
-- Nothing set (no row for the ledger) = no limit: workers behave as before.
--
-- A change makes a new generation of partitions. A worker takes partitions
-- of the new generation only once no partition of an older one is held
-- with a live lease, so old and new capacity are never used together.

CREATE SEQUENCE queuer.capacity_generation;

CREATE TABLE queuer.capacity (
    ledger                text PRIMARY KEY CHECK (ledger ~ '^[A-Za-z0-9._:-]{1,64}$'),
    max_in_flight         bigint CHECK (max_in_flight > 0),
    per_second            bigint CHECK (per_second > 0),
    partition_size        bigint NOT NULL CHECK (partition_size > 0),
    reserved_per_instance bigint NOT NULL DEFAULT 0 CHECK (reserved_per_instance >= 0),
    partitions            integer NOT NULL CHECK (partitions BETWEEN 1 AND 10000),
    generation            bigint NOT NULL,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    updated_by            text NOT NULL DEFAULT session_user,
    CHECK (max_in_flight IS NOT NULL OR per_second IS NOT NULL),
    CHECK (reserved_per_instance % partition_size = 0)
);
COMMENT ON TABLE queuer.capacity IS
    'What a ledger can take, shared by all workers through leased partitions '
    '(queuer.capacity_set / queuer.capacity_clear; docs/OPERATIONS.md).';

CREATE TABLE queuer.capacity_partitions (
    ledger       text NOT NULL REFERENCES queuer.capacity (ledger) ON DELETE CASCADE,
    generation   bigint NOT NULL,
    partition_no integer NOT NULL CHECK (partition_no >= 1),
    in_flight    bigint CHECK (in_flight >= 0),   -- units in flight; NULL = not limited
    per_second   bigint CHECK (per_second >= 0),  -- units a second; NULL = not limited
    holder       text,                            -- instance id, NULL = free
    reserved     boolean NOT NULL DEFAULT false,  -- held as the holder's reservation
    epoch        bigint NOT NULL DEFAULT 0,       -- +1 on every change of holder
    expiry       timestamptz,                     -- the holder's lease
    PRIMARY KEY (ledger, generation, partition_no),
    CHECK ((holder IS NULL) = (expiry IS NULL)),
    CHECK (holder IS NOT NULL OR NOT reserved)
);
CREATE INDEX capacity_partitions_holder ON queuer.capacity_partitions (holder)
    WHERE holder IS NOT NULL;

CREATE TABLE queuer.capacity_instances (
    ledger      text NOT NULL REFERENCES queuer.capacity (ledger) ON DELETE CASCADE,
    instance_id text NOT NULL,
    target      bigint NOT NULL CHECK (target >= 0),  -- cost units waiting or in flight
    cost        text NOT NULL CHECK (cost IN ('batch', 'transactions', 'bytes')),
    expiry      timestamptz NOT NULL,                -- counted as live until then
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (ledger, instance_id)
);

-- Sets (replaces) a ledger's capacity. Unset limits are unlimited; the
-- partition size defaults to 1/32 of the partitioned limit (at least 1).
CREATE FUNCTION queuer.capacity_set(p_ledger text, p_max_in_flight bigint, p_per_second bigint,
                                    p_partition_size bigint DEFAULT NULL,
                                    p_reserved_per_instance bigint DEFAULT 0)
RETURNS queuer.capacity
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    primary_units bigint := coalesce(p_max_in_flight, p_per_second);
    size          bigint := coalesce(p_partition_size, greatest(1, ceil(primary_units / 32.0)::bigint));
    n             bigint;
    gen           bigint;
    row           queuer.capacity;
BEGIN
    IF primary_units IS NULL THEN
        RAISE EXCEPTION 'capacity needs max_in_flight or per_second (or both)'
            USING ERRCODE = '22023';
    END IF;
    IF p_max_in_flight <= 0 OR p_per_second <= 0 OR size <= 0 OR p_reserved_per_instance < 0 THEN
        RAISE EXCEPTION 'capacity values must be positive (reserved: zero or more)'
            USING ERRCODE = '22023';
    END IF;
    IF coalesce(p_reserved_per_instance, 0) % size <> 0 THEN
        RAISE EXCEPTION 'reserved_per_instance (%) must be a multiple of partition_size (%)',
            p_reserved_per_instance, size USING ERRCODE = '22023';
    END IF;
    n := (primary_units + size - 1) / size;
    IF n > 10000 THEN
        RAISE EXCEPTION 'capacity % with partition_size % makes % partitions (at most 10000): '
            'choose a larger partition_size', primary_units, size, n USING ERRCODE = '22023';
    END IF;
    IF coalesce(p_reserved_per_instance, 0) > primary_units THEN
        RAISE EXCEPTION 'reserved_per_instance (%) is more than the whole capacity (%)',
            p_reserved_per_instance, primary_units USING ERRCODE = '22023';
    END IF;
    gen := nextval('queuer.capacity_generation');
    INSERT INTO queuer.capacity AS c (ledger, max_in_flight, per_second, partition_size,
                                      reserved_per_instance, partitions, generation)
    VALUES (p_ledger, p_max_in_flight, p_per_second, size, coalesce(p_reserved_per_instance, 0),
            n, gen)
    ON CONFLICT (ledger) DO UPDATE
       SET max_in_flight = excluded.max_in_flight, per_second = excluded.per_second,
           partition_size = excluded.partition_size,
           reserved_per_instance = excluded.reserved_per_instance,
           partitions = excluded.partitions, generation = excluded.generation,
           updated_at = now(), updated_by = session_user
    RETURNING * INTO row;
    -- The old generation's free or lapsed partitions go now; held ones stay
    -- until their holder gives them back (next step) or their lease ends.
    DELETE FROM queuer.capacity_partitions p
     WHERE p.ledger = p_ledger AND p.generation < gen
       AND (p.holder IS NULL OR p.expiry <= now());
    -- Partition i holds `size` units of the partitioned limit (the last one
    -- what is left); the rate is apportioned by cumulative share so the
    -- partitions add up exactly to both limits.
    INSERT INTO queuer.capacity_partitions (ledger, generation, partition_no, in_flight, per_second)
    SELECT p_ledger, gen, i,
           CASE WHEN p_max_in_flight IS NULL THEN NULL
                ELSE least(size, p_max_in_flight - (i - 1) * size) END,
           CASE WHEN p_per_second IS NULL THEN NULL
                WHEN p_max_in_flight IS NULL THEN least(size, p_per_second - (i - 1) * size)
                ELSE p_per_second * least(i * size, p_max_in_flight) / p_max_in_flight
                     - p_per_second * ((i - 1) * size) / p_max_in_flight END
      FROM generate_series(1, n) AS i;
    RETURN row;
END
$fn$;
COMMENT ON FUNCTION queuer.capacity_set(text, bigint, bigint, bigint, bigint) IS
    'Sets a ledger''s shared capacity (replacing any earlier one); workers pick it up within '
    'a step. See docs/OPERATIONS.md, "Shared ledger capacity".';

-- Removes a ledger's capacity: workers go back to no limit at their next step.
CREATE FUNCTION queuer.capacity_clear(p_ledger text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
    WITH gone AS (DELETE FROM queuer.capacity WHERE ledger = p_ledger RETURNING 1)
    SELECT count(*) > 0 FROM gone
$fn$;
COMMENT ON FUNCTION queuer.capacity_clear(text) IS
    'Removes a ledger''s shared capacity (no limit from the workers'' next step); '
    'false when none was set.';

-- One row per partition, with its holder's target and what the holder
-- holds in all.
CREATE VIEW queuer.capacity_overview AS
    SELECT p.ledger, p.generation, p.partition_no, p.in_flight, p.per_second,
           CASE WHEN p.generation < c.generation THEN 'retiring'
                WHEN p.holder IS NULL THEN 'free'
                WHEN p.expiry > now() THEN 'held'
                ELSE 'lapsed' END AS state,
           p.holder, p.reserved, p.epoch, p.expiry,
           i.target AS holder_target,
           h.in_flight AS holder_in_flight,
           h.per_second AS holder_per_second,
           h.partitions AS holder_partitions
      FROM queuer.capacity_partitions p
      JOIN queuer.capacity c ON c.ledger = p.ledger
      LEFT JOIN queuer.capacity_instances i
             ON i.ledger = p.ledger AND i.instance_id = p.holder
      LEFT JOIN LATERAL (
            SELECT sum(q.in_flight) AS in_flight, sum(q.per_second) AS per_second,
                   count(*) AS partitions
              FROM queuer.capacity_partitions q
             WHERE q.ledger = p.ledger AND q.holder = p.holder AND q.expiry > now()) h
             ON p.holder IS NOT NULL;
COMMENT ON VIEW queuer.capacity_overview IS
    'Shared capacity partitions: state (free, held, lapsed, retiring), holder, lease, and the '
    'holder''s target and total holding.';

-- One row per worker that published a target for a ledger.
CREATE VIEW queuer.capacity_instance_overview AS
    SELECT i.ledger, i.instance_id,
           CASE WHEN i.expiry > now() THEN 'live' ELSE 'gone' END AS state,
           i.target, i.cost, i.updated_at,
           count(p.partition_no) AS partitions,
           count(p.partition_no) FILTER (WHERE p.reserved) AS reserved_partitions,
           CASE WHEN c.max_in_flight IS NULL THEN NULL ELSE coalesce(sum(p.in_flight), 0) END
               AS in_flight,
           CASE WHEN c.per_second IS NULL THEN NULL ELSE coalesce(sum(p.per_second), 0) END
               AS per_second
      FROM queuer.capacity_instances i
      JOIN queuer.capacity c ON c.ledger = i.ledger
      LEFT JOIN queuer.capacity_partitions p
             ON p.ledger = i.ledger AND p.holder = i.instance_id AND p.expiry > now()
     GROUP BY i.ledger, i.instance_id, i.expiry, i.target, i.cost, i.updated_at,
              c.max_in_flight, c.per_second;
COMMENT ON VIEW queuer.capacity_instance_overview IS
    'Each worker''s target and the shared capacity it holds now (in_flight / per_second NULL '
    'when that limit is not set).';

REVOKE ALL ON FUNCTION queuer.capacity_set(text, bigint, bigint, bigint, bigint),
    queuer.capacity_clear(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queuer.capacity_set(text, bigint, bigint, bigint, bigint),
    queuer.capacity_clear(text) TO queuer_operator;
GRANT SELECT ON queuer.capacity TO queuer_worker, queuer_operator;
GRANT SELECT, UPDATE, DELETE ON queuer.capacity_partitions TO queuer_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON queuer.capacity_instances TO queuer_worker;
GRANT SELECT ON queuer.capacity_overview, queuer.capacity_instance_overview
    TO queuer_worker, queuer_operator;

-- What a queuer_worker member may do to the capacity rows, beyond its
-- table grants (the style of migration 0007). Workers log in under roles
-- of queuer_worker and cannot be told apart here, so the checks keep the
-- lease life cycle itself, not who may act on which row:
--   * a partition's ledger, generation, number and sizes are the
--     operator's (queuer.capacity_set), never a worker's;
--   * a partition is taken only when it is free or its lease has lapsed,
--     and every change of holder moves epoch exactly one step up (a live
--     lease never passes straight to another holder);
--   * without such a step only the expiry of a live lease moves (renewal):
--     a lapsed lease is not revived, a reservation not claimed afterwards;
--   * a lease (and a published target's liveness) runs at most an hour
--     from now() (the largest worker.lease_ms), and updated_at is now();
--   * only partitions of an older generation are deleted (retiring).
-- What the checks cannot stop: a member of queuer_worker giving back, or
-- renewing, a partition another worker holds (as it can a claim). The
-- schema owner (its members, the SECURITY DEFINER functions, cascades)
-- is not checked.
CREATE FUNCTION queuer.capacity_check_writer() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    why text;
BEGIN
    IF queuer.role_is_owner() THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    IF TG_TABLE_NAME = 'capacity_instances' THEN
        IF NEW.updated_at IS DISTINCT FROM now()
           OR NEW.expiry > now() + interval '1 hour' THEN
            why := 'a target is published at now(), live for at most an hour';
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        IF NOT EXISTS (SELECT 1 FROM queuer.capacity c
                        WHERE c.ledger = OLD.ledger AND c.generation > OLD.generation) THEN
            why := 'only partitions of an older generation are deleted';
        END IF;
    ELSIF (NEW.ledger, NEW.generation, NEW.partition_no)
              IS DISTINCT FROM (OLD.ledger, OLD.generation, OLD.partition_no)
          OR (NEW.in_flight, NEW.per_second) IS DISTINCT FROM (OLD.in_flight, OLD.per_second) THEN
        why := 'a partition''s identity and sizes are set by queuer.capacity_set';
    ELSIF NEW.epoch = OLD.epoch + 1 THEN
        IF NEW.holder IS NOT NULL AND OLD.holder IS NOT NULL AND OLD.expiry > now() THEN
            why := 'a partition is taken only when free or lapsed';
        END IF;
    ELSIF NEW.epoch IS DISTINCT FROM OLD.epoch THEN
        why := 'epoch goes up by exactly one with every change of holder';
    ELSIF NEW.holder IS DISTINCT FROM OLD.holder OR NEW.reserved IS DISTINCT FROM OLD.reserved THEN
        why := 'a change of holder or reservation moves epoch one step up';
    ELSIF NEW.expiry IS DISTINCT FROM OLD.expiry AND NOT coalesce(OLD.expiry > now(), false) THEN
        why := 'only a live lease is renewed';
    END IF;
    IF why IS NULL AND TG_TABLE_NAME = 'capacity_partitions' AND TG_OP = 'UPDATE'
       AND NEW.expiry IS DISTINCT FROM OLD.expiry AND NEW.expiry > now() + interval '1 hour' THEN
        why := 'a lease runs at most an hour';
    END IF;
    IF why IS NOT NULL THEN
        RAISE EXCEPTION 'role % may not % this % row (ledger %): %', current_user,
                        lower(TG_OP), TG_TABLE_NAME,
                        CASE TG_OP WHEN 'DELETE' THEN OLD.ledger ELSE NEW.ledger END, why
            USING ERRCODE = '42501',
                  HINT = 'workers take free or lapsed partitions, renew and give back '
                         'their own, and delete retired ones (sql/capacity_*.sql)';
    END IF;
    RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END
$fn$;
CREATE TRIGGER capacity_partitions_check_writer BEFORE UPDATE OR DELETE
    ON queuer.capacity_partitions
    FOR EACH ROW EXECUTE FUNCTION queuer.capacity_check_writer();
CREATE TRIGGER capacity_instances_check_writer BEFORE INSERT OR UPDATE
    ON queuer.capacity_instances
    FOR EACH ROW EXECUTE FUNCTION queuer.capacity_check_writer();
REVOKE ALL ON FUNCTION queuer.capacity_check_writer() FROM PUBLIC;
