-- The output choice each sample became (0: the answer's first), NULL when it was not one.
ALTER TABLE samples ADD COLUMN output BIGINT;

-- Grades of requests from production (`POST /v1/feedback`): one row per grade given, the
-- latest of a request's its grade. `score` is 1 for right, 0 for wrong, or the score given.
CREATE TABLE feedback (
    id TEXT PRIMARY KEY,
    request_id TEXT NOT NULL,
    at_ms BIGINT NOT NULL,
    score DOUBLE PRECISION NOT NULL,
    outcome TEXT NOT NULL,
    source TEXT,
    key_name TEXT NOT NULL
);
CREATE INDEX feedback_request ON feedback (request_id, at_ms);
CREATE INDEX requests_request_id ON requests (request_id);
