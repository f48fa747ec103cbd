-- The locks half of the pre-split 0002_users_locks (its users half is version 2 of the records
-- set, in arca-store-records); the version is kept so that a database made before the split
-- adopts it (see arca_store::schema).

-- WebDAV locks (RFC 4918 §6-7), kept with the tree so every provider instance sees them.
-- A lock covers its root path and, when deep, everything below; paths are space-relative.
CREATE TABLE locks (
    token      TEXT PRIMARY KEY NOT NULL,
    space_id   TEXT NOT NULL,
    root_path  TEXT NOT NULL,
    exclusive  BIGINT NOT NULL,
    deep       BIGINT NOT NULL,
    owner_xml  TEXT NOT NULL DEFAULT '',
    holder     TEXT NOT NULL,                     -- user id of the lock's creator
    expires    BIGINT NOT NULL                      -- ms since the epoch; 0 = never
);
CREATE INDEX locks_space ON locks (space_id, root_path);
