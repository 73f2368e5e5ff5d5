-- Before migrating: the queuer group roles that do not exist yet and that
-- the current role may not create (it lacks CREATEROLE and is not a
-- superuser); migrations 0001 and 0011 create missing ones. Roles are
-- cluster-wide, so an administrator may create them once instead. Returns
-- one row, a comma-separated list, NULL when nothing stands in the way.
SELECT string_agg(r.name, ', ' ORDER BY r.ord)
  FROM unnest(ARRAY['queuer_worker', 'queuer_operator', 'queuer_enqueuer', 'queuer_loader'])
       WITH ORDINALITY AS r(name, ord)
 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles g WHERE g.rolname = r.name)
   AND NOT (SELECT u.rolcreaterole OR u.rolsuper
              FROM pg_catalog.pg_roles u WHERE u.rolname = current_user)
