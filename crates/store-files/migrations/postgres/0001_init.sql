-- arca-store schema, PostgreSQL dialect. Keep in step with ../sqlite/0001_init.sql: the store runs
-- the same SQL on both, so only column types may differ (BIGINT here, INTEGER there).

-- A space is a tree of nodes with one owner and one quota. Its root node has the space's id.
CREATE TABLE spaces (
    id      TEXT PRIMARY KEY NOT NULL,
    kind    TEXT NOT NULL,               -- 'personal' | 'project'
    owner   TEXT NOT NULL,               -- user id
    name    TEXT NOT NULL,
    quota   BIGINT,                     -- bytes; NULL or 0 = unlimited
    seq     BIGINT NOT NULL DEFAULT 0,  -- bumped by every tree change: also the per-space write lock
    created BIGINT NOT NULL             -- ns since the epoch
);
-- One personal space per user: concurrent first uses race on this index, the loser re-reads.
CREATE UNIQUE INDEX spaces_personal_owner ON spaces (owner) WHERE kind = 'personal';
CREATE INDEX spaces_owner ON spaces (owner);

-- Every blob the store ever started to write. state 0 = upload in progress (recorded before the
-- first byte is written, so a crash leaves a row that garbage collection finds), 1 = committed.
-- `released` is set whenever a node stops pointing at the blob; the collector then checks
-- whether any node still does (copies share blobs by reference).
CREATE TABLE blobs (
    id       TEXT PRIMARY KEY NOT NULL,
    state    BIGINT NOT NULL,
    size     BIGINT NOT NULL DEFAULT 0,
    created  BIGINT NOT NULL,           -- ms since the epoch
    released BIGINT                     -- ms since the epoch
);
CREATE INDEX blobs_pending ON blobs (created) WHERE state = 0;
CREATE INDEX blobs_released ON blobs (released) WHERE released IS NOT NULL;

CREATE TABLE nodes (
    id        TEXT PRIMARY KEY NOT NULL,
    space_id  TEXT NOT NULL REFERENCES spaces (id) ON DELETE CASCADE,
    parent_id TEXT REFERENCES nodes (id) ON DELETE CASCADE,  -- NULL for a space root
    name      TEXT NOT NULL,                                 -- '' for a space root
    kind      BIGINT NOT NULL,                              -- 1 = directory, 2 = file
    size      BIGINT NOT NULL DEFAULT 0,                    -- dirs: size of the whole subtree
    mtime     BIGINT NOT NULL,                              -- ns since the epoch
    etag      TEXT NOT NULL,
    -- The foreign key is the collector's safety net: a referenced blob row cannot be deleted.
    blob_id   TEXT REFERENCES blobs (id),
    sha1      TEXT,
    md5       TEXT,
    adler32   TEXT,
    created   BIGINT NOT NULL                               -- ns since the epoch
);
-- Path resolution and listing: one indexed lookup per path segment, one range scan per listing.
CREATE UNIQUE INDEX nodes_parent_name ON nodes (parent_id, name);
CREATE INDEX nodes_space ON nodes (space_id);
CREATE INDEX nodes_blob ON nodes (blob_id) WHERE blob_id IS NOT NULL;

-- WebDAV dead properties (PROPPATCH): the value is the XML fragment as text.
CREATE TABLE props (
    node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    ns      TEXT NOT NULL,
    name    TEXT NOT NULL,
    value   TEXT NOT NULL,
    PRIMARY KEY (node_id, ns, name)
);
