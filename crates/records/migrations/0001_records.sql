-- One row per request, whenever its client left.
CREATE TABLE IF NOT EXISTS requests (
    id TEXT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    day TEXT NOT NULL,
    request_id TEXT NOT NULL,
    key_name TEXT NOT NULL,
    model TEXT NOT NULL,
    api TEXT NOT NULL,
    stream BOOLEAN NOT NULL,
    pick TEXT,
    decision TEXT,
    samples_started BIGINT NOT NULL,
    samples_cancelled BIGINT NOT NULL,
    samples_failed BIGINT NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    estimated BOOLEAN NOT NULL,
    sample_tokens TEXT NOT NULL,
    status BIGINT NOT NULL,
    ended TEXT NOT NULL,
    first_byte_ms DOUBLE PRECISION,
    total_ms DOUBLE PRECISION NOT NULL,
    cost_usd DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS requests_at ON requests (at_ms);
CREATE INDEX IF NOT EXISTS requests_model_at ON requests (model, at_ms);

-- With `samples = true`: one row per started sample.
CREATE TABLE IF NOT EXISTS samples (
    request TEXT NOT NULL,
    sample BIGINT NOT NULL,
    finish TEXT NOT NULL,
    place BIGINT,
    prompt_tokens BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    estimated BOOLEAN NOT NULL,
    content TEXT,
    message TEXT,
    logprobs TEXT,
    PRIMARY KEY (request, sample)
);
