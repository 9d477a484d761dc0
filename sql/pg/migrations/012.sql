-- Version 12: a key's own policy for the prompt cache writes a request asks for
-- (cache_control); NULL: the agent's --cache-writes.
ALTER TABLE keys ADD COLUMN cache_writes TEXT CHECK (cache_writes IN ('priced', 'allow', 'deny'));
