-- 0016: batch and service ids are checked when they are written, not on
-- every change of a batch's state.
--
-- The format checks of 0001 (batches_batch_id_format: 128 lower-case hex
-- characters; batches_service_id_format: <5>-<5>::<4> letters and digits)
-- were CHECK constraints of queuer.batches, and PostgreSQL evaluates every
-- CHECK constraint of a table on every UPDATE of a row, whatever columns
-- it changes: two regular expressions for each of a batch's hot-path
-- updates (the mark, the outcome), though neither id ever changes. Measured
-- with bench/pg_hot_path.sh (1,000 x 10 batches, 100 per statement, the
-- real mark and outcome statements, five runs each, alternating): 149 us
-- of backend CPU per batch with the constraints, 136 us without them.
--
-- A domain's CHECK is evaluated where a value is assigned to it (an INSERT,
-- an UPDATE that sets the column, a cast) and not for columns an UPDATE
-- leaves alone. The two columns become domains over text with the same
-- checks under the same names, so a bad id is refused as before (SQLSTATE
-- 23514, check_violation: enqueue's handlers catch it as before), and the
-- state updates no longer pay for them.
--
-- ALTER COLUMN ... TYPE cannot change a column a view uses, so the views
-- over queuer.batches (batch_states, service_overview, stuck_batches,
-- batch_counts) are dropped and created again from their own definitions,
-- comments and grants, read from the catalog just before, and so is the
-- payload trigger (its column list names batch_id). The new type is
-- text underneath (binary coercible: no table rewrite); PostgreSQL checks
-- every stored id against the domain once, under the table's exclusive
-- lock, and rebuilds the indexes on the two columns.

CREATE DOMAIN queuer.batch_id_text AS text COLLATE "C"
    -- length first: the same rule as ^[0-9a-f]{128}$ at a fraction of the cost
    CONSTRAINT batches_batch_id_format
        CHECK (length(VALUE) = 128 AND VALUE ~ '^[0-9a-f]*$');
COMMENT ON DOMAIN queuer.batch_id_text IS
    'A batch id (its header_signature): 128 lower-case hex characters.';
CREATE DOMAIN queuer.service_id_text AS text COLLATE "C"
    CONSTRAINT batches_service_id_format
        CHECK (VALUE ~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}$');
COMMENT ON DOMAIN queuer.service_id_text IS
    'A service id: <circuit>::<service>, 5 letters or digits, -, 5, ::, 4 (Splinter ids).';

DO $do$
DECLARE
    v record;
    g record;
BEGIN
    -- every view that reads queuer.batches, with what makes it up
    CREATE TEMP TABLE batches_views ON COMMIT DROP AS
        SELECT DISTINCT c.oid::regclass::text AS name, pg_get_viewdef(c.oid) AS def,
               obj_description(c.oid, 'pg_class') AS comment, c.relacl, c.relowner
          FROM pg_depend d
          JOIN pg_rewrite r ON r.oid = d.objid
          JOIN pg_class c ON c.oid = r.ev_class
         WHERE d.refobjid = 'queuer.batches'::regclass AND c.relkind = 'v';
    IF EXISTS (SELECT 1 FROM batches_views bv
                 JOIN pg_depend d ON d.refobjid = bv.name::regclass
                 JOIN pg_rewrite r ON r.oid = d.objid AND r.ev_class <> bv.name::regclass) THEN
        RAISE EXCEPTION 'a view depends on a view over queuer.batches; 0016 does not rebuild it';
    END IF;
    FOR v IN SELECT * FROM batches_views LOOP
        EXECUTE format('DROP VIEW %s', v.name);
    END LOOP;

    -- (its column list names batch_id: 0011's trigger, as it was)
    DROP TRIGGER batches_check_payload ON queuer.batches;
    ALTER TABLE queuer.batches
        DROP CONSTRAINT batches_batch_id_format,
        DROP CONSTRAINT batches_service_id_format,
        ALTER COLUMN batch_id TYPE queuer.batch_id_text,
        ALTER COLUMN service_id TYPE queuer.service_id_text;
    CREATE TRIGGER batches_check_payload BEFORE INSERT OR UPDATE OF payload, batch_id
        ON queuer.batches FOR EACH ROW
        WHEN (current_user <> 'queuer_loader')
        EXECUTE FUNCTION queuer.batches_check_payload();

    FOR v IN SELECT * FROM batches_views ORDER BY name LOOP
        EXECUTE format('CREATE VIEW %s AS %s', v.name, v.def);
        EXECUTE format('COMMENT ON VIEW %s IS %L', v.name, v.comment);
        FOR g IN SELECT a.privilege_type, a.grantee::regrole::text AS grantee
                   FROM aclexplode(v.relacl) a
                  WHERE a.grantee <> v.relowner AND a.grantee <> 0 LOOP
            EXECUTE format('GRANT %s ON %s TO %s', g.privilege_type, v.name, g.grantee);
        END LOOP;
    END LOOP;
END
$do$;
