-- Resumable (TUS) uploads in progress, shared by every storage-users instance: any instance
-- serves HEAD, PATCH and DELETE of any upload, and an upload outlives the instance it began on.
-- The bytes are parts in the blob store (one object per PATCH, under uploads/ID/); "received"
-- counts only bytes of parts that are stored durably and listed in upload_parts.
CREATE TABLE uploads (
    id          TEXT PRIMARY KEY NOT NULL,
    user_id     TEXT NOT NULL,                    -- the creator: only their token reaches it
    space_id    TEXT NOT NULL,
    parent_id   TEXT NOT NULL,                    -- the directory the file goes in
    name        TEXT NOT NULL,
    path        TEXT NOT NULL,                    -- target path inside the space
    owner       TEXT NOT NULL,                    -- the space owner
    length      BIGINT NOT NULL,
    received    BIGINT NOT NULL DEFAULT 0,        -- the offset: bytes durably stored
    if_match    TEXT NOT NULL DEFAULT '',         -- etag the file must still have; '' = none
    mtime       BIGINT NOT NULL DEFAULT 0,        -- ns since the epoch; 0 = commit time
    expires     BIGINT NOT NULL,                  -- s since the epoch
    committing  BIGINT NOT NULL DEFAULT 0,        -- ms since the epoch: a commit holds it until then
    created     BIGINT NOT NULL                   -- ms since the epoch
);
CREATE INDEX uploads_expires ON uploads (expires);

-- The parts of an upload, contiguous from 0: part (upload_id, start) holds bytes
-- start..start+size in the blob store object part_key.
CREATE TABLE upload_parts (
    upload_id   TEXT NOT NULL,
    start       BIGINT NOT NULL,
    size        BIGINT NOT NULL,
    part_key    TEXT NOT NULL,
    PRIMARY KEY (upload_id, start)
);
