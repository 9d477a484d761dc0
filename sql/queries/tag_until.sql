-- tag_until: where a page of :tag's rows starts its walk back, unix ms: the end of the
-- last day since :from_ms's that tag_daily has :tag on, 0 when it has none. The writer
-- sums a row's tags into tag_daily in the row's own transaction, so no row carrying
-- :tag that this statement could see started at or after it: a tag no row in the
-- range carries reads nothing, instead of every row of the range (docs/performance.md).
SELECT coalesce((max(day) + 86400) * 1000, 0)
FROM tag_daily
WHERE tag = :tag AND day >= :from_ms / 86400000 * 86400;
