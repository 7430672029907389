-- The keys made over the gateway's admin API: one row per key, its description as JSON (its
-- name, the SHA-256 of its secret, never the secret, its models, tags, limits and expiry),
-- and one counter of changes that every replica reads to know when to read the keys again.
CREATE TABLE api_keys (
    name TEXT PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE api_key_changes (
    id INTEGER PRIMARY KEY,
    version BIGINT NOT NULL
);
INSERT INTO api_key_changes (id, version) VALUES (1, 0);
