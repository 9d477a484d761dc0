-- Version 11: a row is priced by the model it was routed to (docs/pricing.md): the
-- name an answer gave that is neither that model nor a dated snapshot of it, and the
-- classes charged at a fallback rate because the model's card does not price them;
-- and a model's largest output, the estimate of a request that names no bound.
ALTER TABLE requests ADD COLUMN model_reported TEXT;
ALTER TABLE requests ADD COLUMN priced_fallback TEXT;
ALTER TABLE models ADD COLUMN max_output INTEGER CHECK (max_output > 0);
