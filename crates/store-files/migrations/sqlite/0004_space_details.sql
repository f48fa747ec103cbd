-- What the Graph drives API shows of a space beyond its tree: a description and a stable alias
-- ("project/NAME", kept when the space is renamed). Beside `spaces` rather than in it, so the
-- hot paths that read spaces never carry them; a space without a row has neither.
CREATE TABLE space_details (
    space_id    TEXT PRIMARY KEY NOT NULL REFERENCES spaces (id) ON DELETE CASCADE,
    description TEXT NOT NULL DEFAULT '',
    alias       TEXT NOT NULL DEFAULT ''
);
