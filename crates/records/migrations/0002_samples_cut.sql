-- A request whose samples' texts were cut to the record's bound (log-probabilities first,
-- then messages, then contents): its row and its tokens are whole, some texts are not.
ALTER TABLE requests ADD COLUMN samples_cut BOOLEAN NOT NULL DEFAULT FALSE;
