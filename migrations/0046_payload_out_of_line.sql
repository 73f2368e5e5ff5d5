-- 0046: a batch's payload stored once, out of its row.
--
-- Every change of a batch's state writes a new version of its row, and a
-- payload kept in the row is copied into each: about 1 kB a version for a
-- payload of 800 bytes, where the rest of the row takes about 250. Behind
-- a snapshot held open none of those versions go, and every walk over them
-- reads four times the pages it would without the payload. PostgreSQL can
-- keep a value out of line, in the table's TOAST relation, and a new
-- version of the row then points at the stored value instead of copying
-- it; but it considers that only for a row longer than about 2 kB, whatever
-- the table's toast_tuple_target. So each new row carries toast_filler, a
-- default of 2,048 spaces: the row passes that length, and PostgreSQL then
-- moves the payload out of line (its storage EXTERNAL: out of line,
-- uncompressed; any payload longer than the 18-byte pointer that replaces
-- it goes) and compresses the filler, which may only be compressed (MAIN),
-- to about 26 bytes. The ids and the status stay inline and uncompressed
-- (PLAIN), the last error inline (MAIN), so only the payload leaves the
-- row. A row is then about 250 bytes whatever its payload. Rows stored
-- before keep their payloads in the row until they are pruned; nothing is
-- rewritten. Readers are unchanged: a payload reads back whole, and the
-- TOAST rows go with their batch. The price is paid once, when a batch is
-- stored: a row in the TOAST relation and its index entry.
ALTER TABLE queuer.batches
    ALTER COLUMN payload SET STORAGE EXTERNAL,
    ALTER COLUMN batch_id SET STORAGE PLAIN,
    ALTER COLUMN service_id SET STORAGE PLAIN,
    ALTER COLUMN status SET STORAGE PLAIN,
    ALTER COLUMN last_error SET STORAGE MAIN,
    ADD COLUMN toast_filler text DEFAULT repeat(' ', 2048);
ALTER TABLE queuer.batches ALTER COLUMN toast_filler SET STORAGE MAIN;
-- lz4 compresses the filler in a fraction of pglz's time, where the server has it
DO $do$
BEGIN
    ALTER TABLE queuer.batches ALTER COLUMN toast_filler SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    NULL;
END
$do$;
COMMENT ON COLUMN queuer.batches.toast_filler IS
    'Compressible filler (about 26 bytes stored) that makes a new row long enough for '
    'PostgreSQL to store its payload out of line, once, instead of copying it into '
    'every version of the row. Not read by queuer.';
