-- Users of the built-in identity store (storage-system). Passwords are argon2id PHC strings.
CREATE TABLE users (
    id                 TEXT PRIMARY KEY NOT NULL,
    username           TEXT NOT NULL,
    display_name       TEXT NOT NULL,
    mail               TEXT NOT NULL DEFAULT '',
    admin              INTEGER NOT NULL DEFAULT 0,     -- 0/1: no bool on SQLite through Any
    password_hash      TEXT NOT NULL,
    credential_version INTEGER NOT NULL DEFAULT 1,     -- bumped on every password change
    created            INTEGER NOT NULL                -- ns since the epoch
);
CREATE UNIQUE INDEX users_username ON users (username);

-- WebDAV locks (RFC 4918 §6-7), kept with the tree so every provider instance sees them.
-- A lock covers its root path and, when deep, everything below; paths are space-relative.
CREATE TABLE locks (
    token      TEXT PRIMARY KEY NOT NULL,
    space_id   TEXT NOT NULL,
    root_path  TEXT NOT NULL,
    exclusive  INTEGER NOT NULL,
    deep       INTEGER NOT NULL,
    owner_xml  TEXT NOT NULL DEFAULT '',
    holder     TEXT NOT NULL,                     -- user id of the lock's creator
    expires    INTEGER NOT NULL                      -- ms since the epoch; 0 = never
);
CREATE INDEX locks_space ON locks (space_id, root_path);
