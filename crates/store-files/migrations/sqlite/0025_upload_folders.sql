-- Upload folders (Nextcloud chunked uploads) beside the TUS uploads, in the same table so the
-- same expiry, removal and commit claim serve both. An upload folder has a label (the name the
-- client gave it, unique per user), no target until it is assembled, and its bytes as named
-- chunks (upload_chunks). A TUS upload has label '' and may carry the checksum its client
-- announced, verified when it is committed.
ALTER TABLE uploads ADD COLUMN label TEXT NOT NULL DEFAULT '';
ALTER TABLE uploads ADD COLUMN checksum TEXT NOT NULL DEFAULT '';   -- 'sha1:HEX' or ''
-- In-place assembly: chunks that arrive in order are written straight into the blob the file
-- will have (local: at their offset in its file; S3: as parts of its multipart upload), so
-- assembling them copies nothing. `assembly` is that blob's id, `multipart` the S3 upload id,
-- `tail` the bytes (local) or parts (S3) placed so far and `tail_name` the last chunk placed.
-- One chunk at a time is written in place: `placing` (ms since the epoch) holds the tail until
-- then, so a concurrent chunk is stored as an object of its own instead.
ALTER TABLE uploads ADD COLUMN assembly TEXT NOT NULL DEFAULT '';
ALTER TABLE uploads ADD COLUMN multipart TEXT NOT NULL DEFAULT '';
ALTER TABLE uploads ADD COLUMN tail INTEGER NOT NULL DEFAULT 0;
ALTER TABLE uploads ADD COLUMN tail_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE uploads ADD COLUMN tail_name TEXT NOT NULL DEFAULT '';
ALTER TABLE uploads ADD COLUMN tail_small INTEGER NOT NULL DEFAULT 0;
ALTER TABLE uploads ADD COLUMN placing INTEGER NOT NULL DEFAULT 0;
-- The SHA-1, MD5 and Adler-32 state over the first `hashed` bytes placed, carried from chunk
-- to chunk (whichever instance stores the next one), so the checksums are ready at assembly.
ALTER TABLE uploads ADD COLUMN hashed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE uploads ADD COLUMN hash_state BLOB;
ALTER TABLE uploads ADD COLUMN touched INTEGER NOT NULL DEFAULT 0;  -- ms: last chunk stored
CREATE UNIQUE INDEX uploads_label ON uploads (user_id, label) WHERE label <> '';

-- The chunks of an upload folder. A chunk placed in the assembly has `place` (its byte
-- offset, or its first part index on S3) and, on S3, its parts' ETags in `parts`; a chunk
-- stored on its own has place -1 and its object in `part_key`.
CREATE TABLE upload_chunks (
    upload_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    size        INTEGER NOT NULL,
    place       INTEGER NOT NULL,
    part_key    TEXT NOT NULL DEFAULT '',
    parts       TEXT NOT NULL DEFAULT '',
    stored      INTEGER NOT NULL,                 -- ms since the epoch
    PRIMARY KEY (upload_id, name)
);
