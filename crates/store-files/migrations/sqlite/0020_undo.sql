-- The trash bin and file versions of storage-users. Keep in step with ../postgres/0020_undo.sql.
--
-- A removed file or folder keeps its node and its whole subtree: the top node is moved under
-- the space's trash root (a directory node with no parent, id SPACE-trash, made at the first
-- removal) and renamed to its own id, which is its trash key. Removing is therefore one row
-- update whatever the subtree's size, and the trash root's size is the trash's byte count,
-- kept by the same propagation as every directory's. A node is live when its chain of
-- parents ends at the space root (whose id is the space id), trashed when it ends at the
-- trash root.

-- One row per item in a trash (the top of a removed subtree).
CREATE TABLE trash (
    node_id    TEXT PRIMARY KEY NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    space_id   TEXT NOT NULL REFERENCES spaces (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,                -- the name it had
    location   TEXT NOT NULL,                -- the path of its parent then: '/' or '/a/b'
    deleted    INTEGER NOT NULL,             -- ns since the epoch
    -- Unix seconds, unique per (space, name): Nextcloud names an item NAME.dSTAMP.
    stamp      INTEGER NOT NULL,
    deleted_by TEXT NOT NULL DEFAULT ''      -- user id (or public:SHARE) of who removed it
);
CREATE INDEX trash_space_deleted ON trash (space_id, deleted);
CREATE UNIQUE INDEX trash_space_name_stamp ON trash (space_id, name, stamp);

-- Earlier contents of a file: the blob is kept, never copied. A version goes with its node
-- (into the trash and back, or purged with it).
CREATE TABLE versions (
    id       TEXT PRIMARY KEY NOT NULL,      -- the version key
    node_id  TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    space_id TEXT NOT NULL,
    -- Like nodes.blob_id, the collector's safety net: a referenced blob row cannot go.
    blob_id  TEXT NOT NULL REFERENCES blobs (id),
    size     INTEGER NOT NULL,
    mtime    INTEGER NOT NULL,               -- the content's modification time, ns
    etag     TEXT NOT NULL,                  -- the file's etag while this was its content
    sha1     TEXT,
    md5      TEXT,
    adler32  TEXT,
    created  INTEGER NOT NULL,               -- ns: when it stopped being the current content
    label    TEXT NOT NULL DEFAULT ''        -- set by users (Nextcloud's version label)
);
CREATE INDEX versions_node ON versions (node_id, created);
CREATE INDEX versions_blob ON versions (blob_id);
CREATE INDEX versions_space ON versions (space_id, created);
