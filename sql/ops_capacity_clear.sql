-- queuer capacity clear: removes a ledger's shared capacity. $1 ledger.
-- Returns whether one was set.
SELECT queuer.capacity_clear($1)
