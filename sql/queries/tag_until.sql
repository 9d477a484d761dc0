-- tag_until: where a key's page of :tag's rows starts its walk back, unix ms: the end
-- of the last day since :from_ms's that tag_total_daily has :tag on, 0 when it has
-- none. The writer sums the tags of a row with a key into it in the row's own
-- transaction, so no such row carrying :tag that this statement could see started at
-- or after it (rows without a key are in no tag rollup: queryd asks this of a key's
-- page alone): a tag none of the key's rows carries reads nothing, instead of every
-- row of the range (docs/performance.md).
SELECT coalesce((max(day) + 86400) * 1000, 0)
FROM tag_total_daily
WHERE tag = :tag AND day >= :from_ms / 86400000 * 86400;
